"""The runs list's filters, in one place for the admin's changelist (console.run_list_filters)
and the REST runs list (api.runs): what each parameter means, how a bad value is refused, and
what each costs at a ledger of millions of runs.

Every filter narrows a list read newest first a page at a time (run_created_idx, or
run_agent_created_idx with an agent chosen), so a filter that most runs pass costs little: the
scan stops once a page is full. What each one reads (EXPLAIN on PostgreSQL, docs/monitoring.md):

- source: trigger, by run_trigger_created_idx; a fork's change kind is read only on forks.
- version: agent_version_id, by the foreign key's own index (run_agent_version_id_…).
- tag, meta: RunLabel's run_label_lookup_idx (key, value, run), then the runs by primary key.
  Written only for runs that carry labels, so unlabelled traffic pays nothing for it.
- duration range: run_duration_idx, a partial index on finished_at - started_at of ended runs,
  written once at a run's end (an update that already writes every index, since it changes the
  status); 852 ms → 20-64 ms at the scale benchmark's 2.5 million runs.
- cost range: no index. One on cost would be written by every step that adds to a run's cost (a
  non-HOT update per step, as run_status_idx's comment explains); the range is meant to be
  combined with an agent, a version or the date, whose indexes bound the scan.
"""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from django.db.models import DurationField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet
from django.utils.translation import gettext as _

from conversations.models import ForkChange, Run, RunLabel, RunTrigger
from conversations.run_labels import LabelsInvalid, metadata_key_check, metadata_value_check, tag_check

# A fork that changed nothing is a replay (engine.forks, ForkChange.NONE). An evaluation's replays
# of recorded cases are trigger "eval".
REPLAY = "replay"
SOURCES = [*RunTrigger.values, REPLAY]
# Costs are stored with 8 decimals in 14 digits; durations in seconds up to a year.
COST_LIMIT = Decimal("999999")
DURATION_LIMIT = Decimal(366 * 24 * 3600)


class RunFilterInvalid(ValueError):
    """The parameter `field` has a value the list cannot filter by; the message says why."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Range:
    low: Decimal | None = None
    high: Decimal | None = None

    def __bool__(self) -> bool:
        return self.low is not None or self.high is not None


def source_parse(value: str) -> str:
    if value not in SOURCES:
        raise RunFilterInvalid("source", _("Unknown source %(value)r.") % {"value": value[:40]})
    return value


def tag_parse(value: str) -> str:
    try:
        return tag_check(value)
    except LabelsInvalid as exc:
        raise RunFilterInvalid("tag", exc.message) from None


def meta_parse(value: str) -> tuple[str, str]:
    """`key:value` (the value may hold colons; the key may not)."""
    key, colon, text = value.partition(":")
    if not colon:
        raise RunFilterInvalid("meta", _("Write it as key:value."))
    try:
        return metadata_key_check(key), metadata_value_check(text)
    except LabelsInvalid as exc:
        raise RunFilterInvalid("meta", exc.message) from None


def _number(field: str, value: str | None, limit: Decimal) -> Decimal | None:
    if value is None or value.strip() == "":
        return None
    try:
        number = Decimal(value.strip())
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite() or not 0 <= number <= limit:
        raise RunFilterInvalid(field, _("Must be a number from 0 to %(limit)s.") % {"limit": limit})
    return number


def range_parse(name: str, low: str | None, high: str | None, *, limit: Decimal) -> Range:
    """`<name>_min` and `<name>_max` as a range; either may be missing, neither may be above the other."""
    bounds = Range(_number(f"{name}_min", low, limit), _number(f"{name}_max", high, limit))
    if bounds.low is not None and bounds.high is not None and bounds.low > bounds.high:
        raise RunFilterInvalid(f"{name}_min", _("The minimum is above the maximum."))
    return bounds


def runs_from_source(runs: QuerySet[Run], source: str) -> QuerySet[Run]:
    replay = Q(fork_change__kind=ForkChange.NONE.value)
    if source == REPLAY:
        return runs.filter(replay, trigger=RunTrigger.FORK)
    if source == RunTrigger.FORK:
        return runs.filter(trigger=RunTrigger.FORK).exclude(replay)
    return runs.filter(trigger=source)


def runs_labelled(runs: QuerySet[Run], *, key: str, value: str) -> QuerySet[Run]:
    """Runs with the tag `value` (key "") or the metadata pair key: value."""
    return runs.filter(Exists(RunLabel.objects.filter(run=OuterRef("pk"), key=key, value=value)))


def runs_costing(runs: QuerySet[Run], bounds: Range) -> QuerySet[Run]:
    """By the run's own cost, as the list's cost column shows it."""
    if bounds.low is not None:
        runs = runs.filter(cost__gte=bounds.low)
    if bounds.high is not None:
        runs = runs.filter(cost__lte=bounds.high)
    return runs


def runs_lasting(runs: QuerySet[Run], bounds: Range) -> QuerySet[Run]:
    """By finished_at - started_at in seconds (Run.duration_ms, the list's duration column): a
    run that has not both started and finished has no duration and is left out."""
    if not bounds:
        return runs
    runs = runs.alias(
        lasted=ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    ).filter(started_at__isnull=False, finished_at__isnull=False)
    if bounds.low is not None:
        runs = runs.filter(lasted__gte=timedelta(seconds=float(bounds.low)))
    if bounds.high is not None:
        runs = runs.filter(lasted__lte=timedelta(seconds=float(bounds.high)))
    return runs


def runs_filtered(runs: QuerySet[Run], params) -> QuerySet[Run]:
    """`runs` narrowed by the filters in `params` (a query string's values: source, tag, meta,
    cost_min, cost_max, duration_min, duration_max); an empty or missing one filters nothing,
    a bad one is RunFilterInvalid."""
    if params.get("source"):
        runs = runs_from_source(runs, source_parse(params["source"]))
    if params.get("tag"):
        runs = runs_labelled(runs, key="", value=tag_parse(params["tag"]))
    if params.get("meta"):
        key, value = meta_parse(params["meta"])
        runs = runs_labelled(runs, key=key, value=value)
    runs = runs_costing(runs, range_parse("cost", params.get("cost_min"), params.get("cost_max"), limit=COST_LIMIT))
    return runs_lasting(
        runs, range_parse("duration", params.get("duration_min"), params.get("duration_max"), limit=DURATION_LIMIT)
    )
