"""What each alert rule measures, and the open firings the dashboard shows.

Windowed sums read the hourly rollups (conversations.monitoring) for the whole hours they have
finished rebuilding, and the ledger itself only for the edges: the part of the window before
its first whole hour and the hours since the rollups' last rebuild. The ledger reads go through
the indexes on LLMCall.started_at and Run.finished_at, so an evaluation reads an hour or two
of rows whatever the size of the ledger (all of the window when the rollups are not built).
Open runs and pending approvals come from their status indexes: there are few of them.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Min, Q, QuerySet, Sum
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from alerts.models import AlertFiring, AlertRule
from conversations.models import TERMINAL_STATUSES, Approval, LLMCall, Run, RunFeedback, RunStatus
from conversations.monitoring.models import LLMCallHourly, RollupState, RunHourly
from conversations.monitoring.rollups import PRODUCTION_CALLS, PRODUCTION_RUNS, floor_hour
from workspaces.access import of_workspace

WINDOWS = {AlertRule.Window.HOUR: timedelta(hours=1), AlertRule.Window.DAY: timedelta(days=1)}
HOUR = timedelta(hours=1)
# Listed, not "not terminal": an IN list is answered by the runs' status index.
OPEN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)


@dataclass(frozen=True)
class Measurement:
    value: Decimal
    holds: bool
    summary: str


def number_text(value: Decimal) -> str:
    """1000, 0.45, 66.67: no trailing zeros, no exponent."""
    return format(value.normalize(), "f")


def _spans(*, start: datetime, now: datetime) -> tuple[list[tuple[datetime, datetime]], tuple | None]:
    """The window [start, now] split into ledger spans [a, b) and the whole hours [first, last)
    the rollups answer."""
    end = now + timedelta(microseconds=1)  # a row written at `now` is in the window
    state = RollupState.objects.filter(name="ledger").first()
    first = floor_hour(start) + (HOUR if floor_hour(start) < start else timedelta(0))
    last = floor_hour(min(state.refreshed_at, now)) if state else first
    if last <= first:
        return [(start, end)], None
    return [(start, first), (last, end)], (first, last)


def _of_rule(queryset: QuerySet, rule: AlertRule) -> QuerySet:
    """A rule counts only the ledger of its own workspace's agents, "everything" included."""
    return of_workspace(queryset, rule.workspace_id)


def _calls(rule: AlertRule):
    # What the rollups count too, so a window's sum does not depend on how much of it they answer.
    calls = _of_rule(LLMCall.objects.filter(PRODUCTION_CALLS), rule)
    if rule.agent_id:
        return calls.filter(run__agent_id=rule.agent_id)
    if rule.model_config_id:
        return calls.filter(model_config_id=rule.model_config_id)
    return calls


def _call_rollups(rule: AlertRule):
    rollups = _of_rule(LLMCallHourly.objects.all(), rule)
    if rule.agent_id:
        return rollups.filter(agent_id=rule.agent_id)
    if rule.model_config_id:
        return rollups.filter(model_config_id=rule.model_config_id)
    return rollups


def window_usage(*, rule: AlertRule, now: datetime) -> dict:
    """Tokens, cost, finished and failed model calls in the rule's window and scope."""
    spans, hours = _spans(start=now - WINDOWS[rule.window], now=now)
    totals = {"tokens": 0, "cost": Decimal(0), "calls": 0, "failed": 0}
    finished = ~Q(status=LLMCall.Status.STARTED)
    for a, b in spans:
        row = (
            _calls(rule)
            .filter(started_at__gte=a, started_at__lt=b)
            .aggregate(
                tokens=Sum("total_tokens"),
                cost=Sum("cost"),
                calls=Count("pk", filter=finished),
                failed=Count("pk", filter=Q(status=LLMCall.Status.FAILED)),
            )
        )
        for key in totals:
            totals[key] += row[key] or 0
    if hours:
        row = (
            _call_rollups(rule)
            .filter(hour__gte=hours[0], hour__lt=hours[1])
            .aggregate(tokens=Sum("total_tokens"), cost=Sum("cost"), calls=Sum("calls"), failed=Sum("failed"))
        )
        for key in totals:
            totals[key] += row[key] or 0
    return totals


def window_runs(*, rule: AlertRule, now: datetime) -> dict:
    """Runs that ended in the rule's window (for its agent, or all), and how many failed."""
    spans, hours = _spans(start=now - WINDOWS[rule.window], now=now)
    runs = _of_rule(Run.objects.filter(PRODUCTION_RUNS, status__in=TERMINAL_STATUSES), rule)
    rollups = _of_rule(RunHourly.objects.all(), rule)
    if rule.agent_id:
        runs, rollups = runs.filter(agent_id=rule.agent_id), rollups.filter(agent_id=rule.agent_id)
    totals = {"ended": 0, "failed": 0}
    failed = Q(status=RunStatus.FAILED)
    for a, b in spans:
        row = runs.filter(finished_at__gte=a, finished_at__lt=b).aggregate(
            ended=Count("pk"), failed=Count("pk", filter=failed)
        )
        totals["ended"] += row["ended"]
        totals["failed"] += row["failed"]
    if hours:
        row = rollups.filter(hour__gte=hours[0], hour__lt=hours[1]).aggregate(
            ended=Sum("runs"), failed=Sum("runs", filter=failed)
        )
        totals["ended"] += row["ended"] or 0
        totals["failed"] += row["failed"] or 0
    return totals


def window_feedback(*, rule: AlertRule, now: datetime) -> dict:
    """Feedback posted in the rule's window on runs (of its agent, or all), and how much of it was
    negative. Counted by when it was first posted: rating IN (…) with created_at is answered by
    the feedback's (rating, created_at) index, whatever the number of older rows."""
    feedback = RunFeedback.objects.filter(
        rating__in=(1, -1), created_at__gte=now - WINDOWS[rule.window], created_at__lte=now
    )
    feedback = _of_rule(feedback, rule)
    if rule.agent_id:
        feedback = feedback.filter(run__agent_id=rule.agent_id)
    return feedback.aggregate(total=Count("pk"), negative=Count("pk", filter=Q(rating=-1)))


def _negative_feedback_rate(rule: AlertRule, now: datetime) -> Measurement:
    counts = window_feedback(rule=rule, now=now)
    total, negative = counts["total"], counts["negative"]
    rate = (Decimal(negative) * 100 / total).quantize(Decimal("0.01")) if total else Decimal(0)
    summary = _(
        "%(negative)d of %(total)d feedback posts negative in %(hours)d h (%(rate)s%%, threshold %(threshold)s%%)"
    ) % {
        "negative": negative,
        "total": total,
        "hours": _window_hours(rule),
        "rate": rate,
        "threshold": number_text(rule.threshold),
    }
    return Measurement(rate, total >= rule.min_runs and rate >= rule.threshold, summary)


def window_extractions(*, rule: AlertRule, now: datetime) -> dict:
    """Memory extraction calls that ended in the rule's window (of its agent, or all), by when
    they started, and how many succeeded: an answer that could not be used is a failed call."""
    calls = _calls(rule).filter(
        purpose=LLMCall.Purpose.MEMORY, started_at__gte=now - WINDOWS[rule.window], started_at__lte=now
    )
    ended = calls.exclude(status=LLMCall.Status.STARTED)
    return ended.aggregate(total=Count("pk"), succeeded=Count("pk", filter=Q(status=LLMCall.Status.SUCCEEDED)))


def _extraction_rate(rule: AlertRule, now: datetime) -> Measurement:
    counts = window_extractions(rule=rule, now=now)
    total, succeeded = counts["total"], counts["succeeded"]
    rate = (Decimal(succeeded) * 100 / total).quantize(Decimal("0.01")) if total else Decimal(0)
    summary = _(
        "%(succeeded)d of %(total)d memory extraction calls succeeded in %(hours)d h (%(rate)s%%, fires below "
        "%(threshold)s%%)"
    ) % {
        "succeeded": succeeded,
        "total": total,
        "hours": _window_hours(rule),
        "rate": rate,
        "threshold": number_text(rule.threshold),
    }
    return Measurement(rate, total >= rule.min_runs and rate < rule.threshold, summary)


# The online scores' measure, registered at start-up by the app that keeps them (evals, from
# EvalsConfig.ready): (workspace_id=, agent_id=, start=, end=) -> (scores, average). This module
# imports no app above it.
_online_scores: list[Callable[..., tuple[int, float]]] = []


def online_scores_register(measure: Callable[..., tuple[int, float]]) -> None:
    """Measure the online_score rules with `measure`; registering it again is a no-op."""
    if measure not in _online_scores:
        _online_scores.append(measure)


def _online_score(rule: AlertRule, now: datetime) -> Measurement:
    total, average = 0, 0.0
    for measure in _online_scores:
        total, average = measure(
            workspace_id=rule.workspace_id, agent_id=rule.agent_id, start=now - WINDOWS[rule.window], end=now
        )
    value = Decimal(str(average)).quantize(Decimal("0.0001"))
    summary = _("average online score %(value)s over %(total)d scores in %(hours)d h (fires below %(threshold)s)") % {
        "value": number_text(value),
        "total": total,
        "hours": _window_hours(rule),
        "threshold": number_text(rule.threshold),
    }
    return Measurement(value, total >= rule.min_runs and value < rule.threshold, summary)


def _oldest(rows, field: str, now: datetime) -> tuple[int, Decimal]:
    row = rows.aggregate(n=Count("pk"), oldest=Min(field))
    age = (now - row["oldest"]).total_seconds() / 60 if row["oldest"] else 0
    return row["n"], Decimal(age).quantize(Decimal("0.01"))


def _window_hours(rule: AlertRule) -> int:
    return int(WINDOWS[rule.window].total_seconds() // 3600)


def _failure_rate(rule: AlertRule, now: datetime) -> Measurement:
    threshold = rule.threshold
    if rule.model_config_id:
        usage = window_usage(rule=rule, now=now)
        total, failed = usage["calls"], usage["failed"]
        text = _("%(failed)d of %(total)d model calls failed in %(hours)d h (%(rate)s%%, threshold %(threshold)s%%)")
    else:
        runs = window_runs(rule=rule, now=now)
        total, failed = runs["ended"], runs["failed"]
        text = _("%(failed)d of %(total)d runs failed in %(hours)d h (%(rate)s%%, threshold %(threshold)s%%)")
    rate = (Decimal(failed) * 100 / total).quantize(Decimal("0.01")) if total else Decimal(0)
    summary = text % {
        "failed": failed,
        "total": total,
        "hours": _window_hours(rule),
        "rate": rate,
        "threshold": number_text(threshold),
    }
    return Measurement(rate, total >= rule.min_runs and rate >= threshold, summary)


def alert_rule_measure(*, rule: AlertRule, now: datetime) -> Measurement:
    """The rule's value now, whether its condition holds, and a sentence saying so."""
    threshold = rule.threshold
    if rule.kind == AlertRule.Kind.TOKENS:
        value = Decimal(window_usage(rule=rule, now=now)["tokens"])
        text = _("%(value)s tokens in %(hours)d h (threshold %(threshold)s)")
    elif rule.kind == AlertRule.Kind.COST:
        value = window_usage(rule=rule, now=now)["cost"]
        text = _("cost %(value)s in %(hours)d h (threshold %(threshold)s)")
    elif rule.kind == AlertRule.Kind.FAILURE_RATE:
        return _failure_rate(rule, now)
    elif rule.kind == AlertRule.Kind.NEGATIVE_FEEDBACK:
        return _negative_feedback_rate(rule, now)
    elif rule.kind == AlertRule.Kind.EXTRACTION_RATE:
        return _extraction_rate(rule, now)
    elif rule.kind == AlertRule.Kind.ONLINE_SCORE:
        return _online_score(rule, now)
    elif rule.kind == AlertRule.Kind.STUCK_RUNS:
        runs = Run.objects.filter(status__in=OPEN_STATUSES, created_at__lt=now - timedelta(minutes=int(threshold)))
        runs = _of_rule(runs, rule)
        if rule.agent_id:
            runs = runs.filter(agent_id=rule.agent_id)
        count, value = _oldest(runs, "created_at", now)
        text = ngettext(
            "%(count)d run unfinished after %(threshold)s min; the oldest started %(value)s min ago",
            "%(count)d runs unfinished after %(threshold)s min; the oldest started %(value)s min ago",
            count,
        ) % {
            "count": count,
            "threshold": number_text(threshold),
            "value": value,
        }
        return Measurement(value, count > 0, text)
    else:
        approvals = _of_rule(Approval.objects.filter(status=Approval.Status.PENDING), rule)
        if rule.agent_id:
            approvals = approvals.filter(run__agent_id=rule.agent_id)
        count, value = _oldest(approvals, "created_at", now)
        text = ngettext(
            "%(count)d approval pending; the oldest has waited %(value)s min (threshold %(threshold)s min)",
            "%(count)d approvals pending; the oldest has waited %(value)s min (threshold %(threshold)s min)",
            count,
        ) % {
            "count": count,
            "threshold": number_text(threshold),
            "value": value,
        }
        return Measurement(value, value >= threshold, text)
    summary = text % {"value": number_text(value), "hours": _window_hours(rule), "threshold": number_text(threshold)}
    return Measurement(value, value >= threshold, summary)


def alert_firings_open() -> list[AlertFiring]:
    return list(
        AlertFiring.objects.filter(resolved_at__isnull=True)
        .select_related("rule", "rule__agent", "rule__model_config")
        .order_by("started_at")
    )


def alert_rules_firing(rules: QuerySet[AlertRule] | None = None) -> list[tuple[str, bool]]:
    """Every enabled rule (of `rules`: all by default), or any with an open firing, by name:
    whether it fires now."""
    rules = (
        (AlertRule.objects.all() if rules is None else rules)
        .annotate(open=Count("firings", filter=Q(firings__resolved_at__isnull=True)))
        .filter(Q(enabled=True) | Q(open__gt=0))
        .order_by("name", "pk")
    )
    return [(rule.name, rule.open > 0) for rule in rules]
