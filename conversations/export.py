"""The audit trail as files: runs with their model calls, tool invocations, approvals and events.

Two shapes, both streamed run by run so an export of a million rows holds one batch in memory:

- JSONL: one line per run, a JSON object with the run's fields and its rows nested under
  `llm_calls`, `tool_invocations`, `approvals` and `events`, each in the order they happened.
  A run and everything it did stay together, which is what a reader of one run wants.
- CSV: one flat table that a spreadsheet opens, one line per ledger row with a `kind` column
  (run, llm_call, tool_invocation, approval, event) and the columns most rows share; whatever
  else a row holds is the JSON object in the last column, `detail`.

What is exported is named field by field (never "all fields"), so no secret can slip in: model
configs' API keys, webhook secrets and tools' secret headers live on models this module never reads.
A model call's `request` holds the agent's system prompt and tool definitions: it is exported
only to those who may read agents' configuration (conversations.selectors.agent_config_visible_to),
as GET /runs/{id}/steps/ shows no request at all; everyone else gets the call without it.
"""

import csv
import io
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, time

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext as _

from agents.models import Agent
from conversations.models import Approval, LLMCall, Run, RunEvent, ToolInvocation
from conversations.selectors import run_final_answer_annotation
from conversations.usage import USAGE_FIELDS

# Runs read per batch, with all their rows: a run rarely has more than a few dozen rows (bounded
# by max iterations), so a batch holds a few thousand rows at most.
BATCH_RUNS = 200

FORMATS = ("jsonl", "csv")
CONTENT_TYPES = {"jsonl": "application/x-ndjson; charset=utf-8", "csv": "text/csv; charset=utf-8"}


def _columns(*names) -> dict[str, str]:
    """Export name -> lookup; a plain name is a field read as it is, a pair renames a lookup."""
    return dict(name if isinstance(name, tuple) else (name, name) for name in names)


_RUN_FIELDS = _columns(
    "id",
    "conversation_id",
    ("agent", "agent__slug"),
    ("agent_version", "agent_version__number"),
    ("user", "request__user__username"),
    ("input", "request__content"),
    ("output", "export_output"),
    "status",
    "stop_reason",
    "error",
    "cancel_requested",
    "iterations",
    *USAGE_FIELDS,
    "usage_estimated",
    "cost",
    "recoveries",
    # A fork (engine.forks): its source and the step it ran itself from.
    ("forked_from", "forked_from_id"),
    "fork_step",
    "created_at",
    "started_at",
    "finished_at",
)
_CHILDREN = {
    "llm_calls": (
        LLMCall,
        ("started_at", "id"),
        _columns(
            "id",
            "purpose",
            "iteration",
            "attempt",
            "copied",
            "provider",
            "model_name",
            "status",
            "http_status",
            "finish_reason",
            *USAGE_FIELDS,
            "usage_estimated",
            "cost",
            "latency_ms",
            "error",
            "started_at",
            "finished_at",
            "request",
            "response",
        ),
    ),
    "tool_invocations": (
        ToolInvocation,
        ("llm_call_id", "position"),
        _columns(
            "id",
            "llm_call_id",
            "tool_name",
            "tool_call_id",
            "position",
            "status",
            "raw_arguments",
            "arguments",
            "validation_errors",
            "result",
            "truncated",
            "simulated",
            "copied",
            "error",
            "details",
            "latency_ms",
            "created_at",
            "started_at",
            "finished_at",
        ),
    ),
    "approvals": (
        Approval,
        ("created_at", "id"),
        _columns(
            "id",
            "invocation_id",
            "tool_call_id",
            "status",
            "arguments",
            "arguments_hash",
            "request_reason",
            ("decided_by", "decided_by__username"),
            "decided_at",
            "channel",
            "reason",
            "expires_at",
            "created_at",
        ),
    ),
    "events": (RunEvent, ("seq",), _columns("seq", "type", "payload", "created_at")),
}
KINDS = {"llm_calls": "llm_call", "tool_invocations": "tool_invocation", "approvals": "approval", "events": "event"}


class ExportFilterError(ValueError):
    """A filter of an export that cannot be applied; `param` names it."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param, self.message = param, message


@dataclass(frozen=True)
class ExportFilters:
    format: str
    agent: Agent | None
    since: datetime | None
    until: datetime | None


def _instant(param: str, raw: str) -> datetime:
    # A bare date means its midnight, in the site's time zone; a time without an offset too.
    try:
        value = parse_datetime(raw)
        if value is None:
            day = parse_date(raw)
            value = datetime.combine(day, time.min) if day is not None else None
    except ValueError:
        value = None
    if value is None:
        raise ExportFilterError(
            param, _("%(param)s must be an ISO 8601 date or date-time, e.g. 2026-11-30T08:00:00Z.") % {"param": param}
        )
    return timezone.make_aware(value) if timezone.is_naive(value) else value


def export_filters_parse(
    *, format: str, agent: str = "", since: str = "", until: str = "", agents: QuerySet[Agent] | None = None
) -> ExportFilters:
    """The filters of an export, from text (a query string, a command line); ExportFilterError
    names the first one that is wrong. `agents` are those the agent filter may name (all)."""
    if format not in FORMATS:
        raise ExportFilterError("format", _("format must be one of: %(formats)s.") % {"formats": ", ".join(FORMATS)})
    found = None
    if agent:
        found = (Agent.objects.all() if agents is None else agents).filter(slug=agent).first()
        if found is None:
            raise ExportFilterError("agent", _("No agent has the slug %(slug)r.") % {"slug": agent})
    start = _instant("since", since) if since else None
    end = _instant("until", until) if until else None
    if start and end and start >= end:
        raise ExportFilterError("until", _("until must be later than since."))
    return ExportFilters(format=format, agent=found, since=start, until=end)


def _rows(queryset: QuerySet, fields: dict[str, str]) -> Iterator[dict]:
    # Read by lookup, named for the export (agent__slug -> agent): values() cannot rename a
    # lookup to the name of a model field.
    lookups = list(fields.values())
    for row in queryset.values_list(*lookups):
        yield dict(zip(fields, row, strict=True))


# The model call's field that carries the agent's configuration (its rendered system prompt).
_CONFIG_FIELDS = {"llm_calls": ("request",)}


def _children(run_ids: list, *, requests: bool) -> dict[str, dict]:
    """The rows of these runs, by kind and run id, each list in the order the run made them;
    without the model calls' requests unless `requests`."""
    found: dict[str, dict] = {}
    for key, (model, order, fields) in _CHILDREN.items():
        if not requests:
            fields = {name: lookup for name, lookup in fields.items() if name not in _CONFIG_FIELDS.get(key, ())}
        rows = defaultdict(list)
        queryset = model.objects.filter(run_id__in=run_ids).order_by("run_id", *order)
        for row in _rows(queryset, {"run_id": "run_id", **fields}):
            rows[row.pop("run_id")].append(row)
        found[key] = rows
    return found


def _batches(runs: QuerySet[Run], batch_size: int) -> Iterator[list[dict]]:
    # Keyset pages, each a statement of its own that starts after the last run read: no cursor
    # lives on the connection between statements, so the export works through PgBouncer's
    # transaction pooling (a holdable cursor would be looked for on another server connection).
    # Named apart from runs_visible_to's `output`, which the given runs may carry already.
    annotated = runs.order_by().annotate(export_output=run_final_answer_annotation())
    after = None
    while True:
        page = annotated
        if after is not None:
            # created_at >= t first, so run_created_idx bounds the scan; ties on t go by id.
            page = page.filter(created_at__gte=after[0]).exclude(created_at=after[0], id__lte=after[1])
        rows = page.order_by("created_at", "id").values_list(*_RUN_FIELDS.values())[:batch_size]
        batch = [dict(zip(_RUN_FIELDS, row, strict=True)) for row in rows]
        if batch:
            yield batch
        if len(batch) < batch_size:
            return
        after = (batch[-1]["created_at"], batch[-1]["id"])


def ledger_export_records(*, runs: QuerySet[Run], requests: bool, batch_size: int = BATCH_RUNS) -> Iterator[dict]:
    """Each run (oldest first) as a dict with its rows nested by kind; `requests`: with the
    model calls' requests (the agents' system prompts), for those who may read agents' configuration."""
    for batch in _batches(runs, batch_size):
        children = _children([run["id"] for run in batch], requests=requests)
        for run in batch:
            yield {**run, **{key: children[key].get(run["id"], []) for key in _CHILDREN}}


def _json(value) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False, separators=(",", ":"))


def jsonl_lines(records: Iterable[dict]) -> Iterator[str]:
    for record in records:
        yield _json(record) + "\n"


# The CSV's shared columns, and for each kind the field each one shows.
CSV_COLUMNS = [
    "kind",
    "run_id",
    "agent",
    "id",
    "at",
    "name",
    "status",
    "step",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cost",
    "latency_ms",
    "error",
    "detail",
]
_CSV_SOURCES = {
    "run": {"id": "id", "at": "created_at", "name": "stop_reason", "step": "iterations"},
    "llm_call": {"at": "started_at", "name": "model_name", "step": "iteration"},
    "tool_invocation": {"at": "created_at", "name": "tool_name", "step": "position"},
    "approval": {"at": "created_at", "name": "tool_call_id"},
    "event": {"id": "seq", "at": "created_at", "name": "type", "step": "seq"},
}
_SHARED = ("id", "status", "prompt_tokens", "completion_tokens", "total_tokens", "cost", "latency_ms", "error")
# A cell a spreadsheet would read as a formula (model output is untrusted text) is prefixed with
# an apostrophe, the spreadsheets' own "this is text" mark (OWASP's advice for CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return _json(value)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _csv_row(kind: str, run_id, agent: str, row: dict) -> list:
    sources = {**{name: name for name in _SHARED}, **_CSV_SOURCES[kind]}
    cells = {"kind": kind, "run_id": run_id, "agent": agent}
    used = set()
    for column in CSV_COLUMNS[3:-1]:
        field = sources.get(column)
        if field is not None and field in row:
            cells[column] = row[field]
            used.add(field)
    cells["detail"] = {key: value for key, value in row.items() if key not in used}
    return [_cell(cells.get(column)) for column in CSV_COLUMNS]


def csv_lines(records: Iterable[dict]) -> Iterator[str]:
    """The header, then per run its row followed by its rows, one CSV text chunk per run."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    yield buffer.getvalue()
    for record in records:
        buffer.seek(0)
        buffer.truncate()
        run = {key: value for key, value in record.items() if key not in _CHILDREN}
        writer.writerow(_csv_row("run", record["id"], record["agent"], run))
        for key, kind in KINDS.items():
            for row in record[key]:
                writer.writerow(_csv_row(kind, record["id"], record["agent"], row))
        yield buffer.getvalue()


def ledger_export_lines(*, runs: QuerySet[Run], format: str, requests: bool) -> Iterator[str]:
    """The export of these runs in `format` (one of FORMATS), as text chunks to write in order;
    `requests` as ledger_export_records takes it."""
    records = ledger_export_records(runs=runs, requests=requests)
    return jsonl_lines(records) if format == "jsonl" else csv_lines(records)
