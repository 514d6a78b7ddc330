"""Retention: old runs leave the ledger with a tombstone; idempotency keys expire.

The ledger is append-only everywhere else; this is the one place rows are deleted, and only by
an agent's retention policy (Agent.retention_days), a batch of runs per transaction. Each batch
adds its counts to the purge's tombstone (RunPurge) in the same transaction, so the tombstone
always says exactly what is gone, even if the sweep stops half-way. What apps above this one keep
about runs' events (notifications: webhook deliveries) goes with the runs, through what they
register here at start-up (event_records_register).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import CASCADE, SET_NULL, Exists, OuterRef, QuerySet
from django.utils import timezone

from agents.models import Agent
from conversations.models import (
    TERMINAL_STATUSES,
    Approval,
    ApprovalGrant,
    Conversation,
    GuardrailTrigger,
    LLMCall,
    Message,
    Run,
    RunEvent,
    RunLabel,
    RunPurge,
    RunRequest,
    RunStatus,
    ToolInvocation,
)

# Runs deleted per transaction: each holds their rows' locks until it commits, and its
# statements name every run id as a parameter.
PURGE_BATCH_RUNS = 200
EXPIRY_BATCH_ROWS = 1000

# What a purge counts of the ledger's own rows, in the order they are deleted (rows before the
# rows they point to), after what the registered apps delete (purge_kinds).
PURGE_KINDS = (
    "messages",
    "approval_grants",
    "approvals",
    "tool_invocations",
    "llm_calls",
    "events",
    "guardrail_triggers",
    "run_requests",
    "run_labels",
    "runs",
    "conversations",
)


@dataclass(frozen=True)
class EventRecords:
    """Rows an app above this one keeps about runs' events, which a purge deletes with the runs
    (notifications: webhook deliveries and their attempts). `kinds`: what it counts, in the
    tombstone; `delete(events=..., params=...)` deletes its rows about the events an SQL SELECT
    of their ids gives (over `params`), before the events go, and returns how many of each kind;
    `count(events=...)` counts those of a queryset of events (a dry run); `keeps(conversation)`
    an Exists of its rows that keep a conversation the purge left without runs (a webhook on it)
    from going, given the conversation's OuterRef; `expire()` deletes those of its rows that
    outlived their own retention, on the daily sweep (event_records_expire), and says how many."""

    kinds: tuple[str, ...]
    delete: Callable[..., dict[str, int]]
    count: Callable[..., dict[str, int]]
    keeps: Callable[[OuterRef], Exists]
    expire: Callable[[], dict[str, int]]


# Filled at start-up by the apps above this one, from their AppConfig.ready(): this module
# imports none of them, and a process that loads such an app cannot purge runs without its rows.
_event_records: list[EventRecords] = []


def event_records_register(records: EventRecords) -> None:
    """Purge `records` with the runs; registering the same again is a no-op."""
    if records not in _event_records:
        _event_records.append(records)


def event_records_expire() -> dict[str, int]:
    """Each registered app's expiry (EventRecords.expire): how many rows of each kind went."""
    return {kind: n for records in _event_records for kind, n in records.expire().items()}


def purge_kinds() -> tuple[str, ...]:
    """What a purge counts, in the order the rows are deleted: the registered apps' first."""
    return (*(kind for records in _event_records for kind in records.kinds), *PURGE_KINDS)


@dataclass
class PurgeResult:
    agent: str
    cutoff: datetime
    counts: dict[str, int] = field(default_factory=dict)
    tombstone_id: int | None = None


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _column(model, name: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def _execute(sql: str, params: list) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _runs_delete(run_ids: list) -> dict[str, int]:
    """Delete these runs and every row that belongs to them; the counts by kind.

    Plain DELETE statements by run id: Django's cascade would first load every row (with the
    model calls' whole requests and responses) to delete it."""
    keys = [Run._meta.pk.get_db_prep_value(pk, connection) for pk in run_ids]
    marks = ", ".join(["%s"] * len(keys))
    events = f'SELECT "id" FROM {_table(RunEvent)} WHERE {_column(RunEvent, "run")} IN ({marks})'
    calls = f'SELECT "id" FROM {_table(LLMCall)} WHERE {_column(LLMCall, "run")} IN ({marks})'
    counts = {kind: n for records in _event_records for kind, n in records.delete(events=events, params=keys).items()}
    # A conversation's summary may have been made by a call of a purged run: the text stays,
    # the pointer to the call goes with the call.
    _execute(
        f"UPDATE {_table(Conversation)} SET {_column(Conversation, 'context_summary_call')} = NULL "
        f"WHERE {_column(Conversation, 'context_summary_call')} IN ({calls})",
        keys,
    )
    # Agents as tools: a purged run's delegated runs that are kept lose their link to it.
    _execute(
        f"UPDATE {_table(Run)} SET {_column(Run, 'parent_run')} = NULL, "
        f"{_column(Run, 'parent_tool_invocation')} = NULL WHERE {_column(Run, 'parent_run')} IN ({marks})",
        keys,
    )
    # Rows of other apps that point at the calls and messages about to go (embedding calls,
    # memories and their changes) first: their foreign keys are checked at commit.
    messages = f'SELECT "id" FROM {_table(Message)} WHERE {{column}} IN ({{ids}})'
    _dependants_release(LLMCall, calls, keys)
    _dependants_release(Message, messages.format(column=_column(Message, "run"), ids=marks), keys)
    _dependants_release(Message, messages.format(column=_column(Message, "llm_call"), ids=calls), keys)
    # Two statements, each by its own index: as one (run IN … OR llm_call IN …) PostgreSQL read
    # the whole message table for every batch (measured: over a second a batch at 600,000
    # messages, and growing with the table).
    counts["messages"] = _execute(
        f"DELETE FROM {_table(Message)} WHERE {_column(Message, 'run')} IN ({marks})", keys
    ) + _execute(f"DELETE FROM {_table(Message)} WHERE {_column(Message, 'llm_call')} IN ({calls})", keys)
    for kind, model in (
        ("approval_grants", ApprovalGrant),
        ("approvals", Approval),
        ("tool_invocations", ToolInvocation),
        ("llm_calls", LLMCall),
        ("events", RunEvent),
        ("guardrail_triggers", GuardrailTrigger),
        ("run_requests", RunRequest),
        ("run_labels", RunLabel),
    ):
        counts[kind] = _execute(f"DELETE FROM {_table(model)} WHERE {_column(model, 'run')} IN ({marks})", keys)
    # A fork outlives its source: it keeps its copied steps and loses only the link.
    forked_from = _column(Run, "forked_from")
    _execute(f"UPDATE {_table(Run)} SET {forked_from} = NULL WHERE {forked_from} IN ({marks})", keys)
    _dependants_release(Run, marks, keys)
    counts["runs"] = _execute(f'DELETE FROM {_table(Run)} WHERE "id" IN ({marks})', keys)
    return counts


def _dependants_release(model, ids: str, keys: list) -> None:
    """Rows of apps above this one that point at the `model` rows about to go (`ids`: a list of
    placeholders or a SELECT of ids, over `keys`): knowledge searches and embedding calls,
    memories, a schedule's fires, a hook's deliveries. Deleted with them where their foreign key
    cascades, unlinked where it is SET_NULL. This module cannot name them, so they are found
    through the model graph, and not counted."""
    # include_hidden: a foreign key named "+" has no reverse accessor, but it has its constraint.
    relations = [f for f in model._meta.get_fields(include_hidden=True) if f.auto_created and not f.concrete]
    for relation in relations:
        mine = relation.related_model._meta.app_label == "conversations"  # deleted by name, in order
        if mine or relation.many_to_many or relation.on_delete not in (CASCADE, SET_NULL):
            continue
        other, column = relation.related_model, _column(relation.related_model, relation.field.name)
        if relation.on_delete is CASCADE:
            _execute(f"DELETE FROM {_table(other)} WHERE {column} IN ({ids})", keys)
        else:
            _execute(f"UPDATE {_table(other)} SET {column} = NULL WHERE {column} IN ({ids})", keys)


def _conversations_delete(conversation_ids: set, cutoff: datetime) -> dict[str, int]:
    """Delete the conversations that the purge left without runs (and that no registered app's
    rows keep: a webhook on one),
    with their remaining messages (a chat completion's own system message has no run)."""
    empty = (
        Conversation.objects.filter(pk__in=conversation_ids, created_at__lt=cutoff)
        .exclude(Exists(Run.objects.filter(conversation=OuterRef("pk"))))
        .exclude(Exists(RunRequest.objects.filter(conversation=OuterRef("pk"))))
    )
    for records in _event_records:
        empty = empty.exclude(records.keeps(OuterRef("pk")))
    empty = list(empty.values_list("pk", flat=True))
    if not empty:
        return {"messages": 0, "conversations": 0}
    keys = [Conversation._meta.pk.get_db_prep_value(pk, connection) for pk in empty]
    marks = ", ".join(["%s"] * len(keys))
    _dependants_release(Conversation, marks, keys)
    _dependants_release(
        Message, f'SELECT "id" FROM {_table(Message)} WHERE {_column(Message, "conversation")} IN ({marks})', keys
    )
    return {
        "messages": _execute(
            f"DELETE FROM {_table(Message)} WHERE {_column(Message, 'conversation')} IN ({marks})", keys
        ),
        "conversations": _execute(f'DELETE FROM {_table(Conversation)} WHERE "id" IN ({marks})', keys),
    }


def runs_purgeable(*, agent: Agent, cutoff: datetime) -> QuerySet[Run]:
    """The agent's runs that ended and were created before the cutoff. A conversation with a run
    still going keeps all of its runs: that run's context is read from their messages. (The open
    statuses are named, not "not terminal": a few open runs are found by run_status_idx, where
    "not terminal" read every run of the ledger for each batch.)"""
    open_statuses = [value for value in RunStatus.values if value not in TERMINAL_STATUSES]
    active = Run.objects.filter(conversation=OuterRef("conversation"), status__in=open_statuses)
    return Run.objects.filter(agent=agent, status__in=TERMINAL_STATUSES, created_at__lt=cutoff).exclude(Exists(active))


def _dry_counts(runs: QuerySet[Run]) -> dict[str, int]:
    ids = runs.values("pk")
    events = RunEvent.objects.filter(run__in=ids)
    return {
        **{kind: n for records in _event_records for kind, n in records.count(events=events).items()},
        "messages": Message.objects.filter(run__in=ids).count(),
        "approval_grants": ApprovalGrant.objects.filter(run__in=ids).count(),
        "approvals": Approval.objects.filter(run__in=ids).count(),
        "tool_invocations": ToolInvocation.objects.filter(run__in=ids).count(),
        "llm_calls": LLMCall.objects.filter(run__in=ids).count(),
        "events": events.count(),
        "guardrail_triggers": GuardrailTrigger.objects.filter(run__in=ids).count(),
        "run_requests": RunRequest.objects.filter(run__in=ids).count(),
        "run_labels": RunLabel.objects.filter(run__in=ids).count(),
        "runs": runs.count(),
    }


def runs_purge(
    *,
    agent: Agent,
    now: datetime | None = None,
    dry_run: bool = False,
    batch_size: int = PURGE_BATCH_RUNS,
    pause: float | None = None,
) -> PurgeResult:
    """Apply the agent's retention policy: delete its ended runs older than retention_days with
    all their rows, and record what went in a tombstone. A dry run only counts (runs' rows, not
    the conversations a purge would leave empty). No policy, nothing to do.

    Oldest first, a batch per transaction, each batch read from run_agent_created_idx where the
    last one ended (so no batch walks the index entries of the rows the earlier ones deleted,
    which stay until vacuum); after each batch the purge rests `pause` times as long as the batch
    took (AGENTRY_RETENTION_PAUSE), leaving the database to live runs: at 1.0, purging a
    10-million-call ledger slowed runs beside it 1.05× on two cores, 1.28× without the rest
    (docs/benchmark.md)."""
    now = now or timezone.now()
    pause = settings.AGENTRY_RETENTION_PAUSE if pause is None else pause
    result = PurgeResult(agent=agent.slug, cutoff=now, counts=dict.fromkeys(purge_kinds(), 0))
    if not agent.retention_days:
        return result
    result.cutoff = cutoff = now - timedelta(days=agent.retention_days)
    runs = runs_purgeable(agent=agent, cutoff=cutoff)
    if dry_run:
        result.counts.update(_dry_counts(runs))
        return result
    since = None
    while True:
        started = time.monotonic()
        with transaction.atomic():
            # Locked, and skipped if locked: an operator acting on one of these runs right now
            # keeps it until the next sweep. Every run a batch returns is deleted, so starting the
            # next one at the same creation time (ties included) never returns a run twice.
            pending = runs if since is None else runs.filter(created_at__gte=since)
            batch = list(
                pending.order_by("created_at")
                .select_for_update(skip_locked=True, of=("self",))
                .values_list("pk", "conversation_id", "created_at")[:batch_size]
            )
            if not batch:
                break
            since = batch[-1][2]
            counts = _runs_delete([pk for pk, _, _ in batch])
            for kind, count in _conversations_delete({c for _, c, _ in batch}, cutoff).items():
                counts[kind] = counts.get(kind, 0) + count
            result.counts = {kind: result.counts[kind] + counts.get(kind, 0) for kind in result.counts}
            if result.tombstone_id is None:
                set_by = agent.retention_set_by
                result.tombstone_id = RunPurge.objects.create(
                    agent=agent,
                    agent_slug=agent.slug,
                    retention_days=agent.retention_days,
                    cutoff=cutoff,
                    counts=result.counts,
                    policy_set_by=set_by,
                    policy_set_by_username=set_by.get_username() if set_by else "",
                    policy_set_at=agent.retention_set_at,
                    finished_at=timezone.now(),
                ).pk
            else:
                RunPurge.objects.filter(pk=result.tombstone_id).update(counts=result.counts, finished_at=timezone.now())
        if len(batch) < batch_size:
            break
        if pause:
            time.sleep(pause * (time.monotonic() - started))
    return result


def idempotency_keys_expire(*, hours: float, now: datetime | None = None, batch_size: int = EXPIRY_BATCH_ROWS) -> int:
    """Clear the idempotency keys of requests older than `hours`: the same key then starts a new
    run. The request itself stays (it is the run's input, part of the ledger)."""
    cutoff = (now or timezone.now()) - timedelta(hours=hours)
    expired = RunRequest.objects.filter(created_at__lt=cutoff).exclude(idempotency_key="")
    cleared = 0
    while True:
        ids = list(expired.values_list("pk", flat=True)[:batch_size])
        if not ids:
            return cleared
        cleared += RunRequest.objects.filter(pk__in=ids).exclude(idempotency_key="").update(idempotency_key="")
