"""The run state machine: the one function that changes a run's status.

    from               to                  event                  who moves it, and the guard
    queued             running             run.running            a worker's claim (`owner` takes the lease)
    running            running             run.running            a worker's claim of a lapsed lease (`where`)
    running            queued              run.requeued           the holder between steps (`owner`), the sweeper
                                                                  (lapsed lease), an operator
    queued             queued              run.requeued           an operator handing a queued run out again
    running            awaiting_approval   run.awaiting_approval  the holder (`owner`), approvals pending
    awaiting_approval  queued              run.queued             the decision that leaves nothing pending
    running            awaiting_children   run.awaiting_children  the holder (`owner`), delegated runs active
    awaiting_children  queued              run.queued             the end of its last active delegated run
    any active         completed           run.completed          run_finish (and the commit of a final
                                                                  answer: transition_guard); the active statuses are
    any active         failed              run.failed             queued, running, awaiting_approval
    any active         cancelled           run.cancelled          and awaiting_children
    any active         expired             run.expired
    failed             queued              run.retried            an operator's retry (`by`), and nobody else

Every other pair is refused with TransitionRefused: a programming error, raised before any
write. Terminal states are final; a failed run's retry by a person is the one way out of one.

A transition is one conditional UPDATE (the status is one of `expect`, plus the guards) and,
only when it matched, the pair's event, in the same transaction: a racing writer that got there
first makes it return False and write nothing. Every status but running holds no lease, so
leaving running clears the lease, and entering it gives the lease to `owner`. The UPDATE also
takes the event's sequence number and guards a ledger batch (conversations.batch) with the
event, so on PostgreSQL a change and its event are one statement.

The holder's change out of running may also be the guard of a batch it builds with writes and
events of its own (transition_guard): the commit that records a run's final answer ends the run
with it (engine.runs.AnswerEnding).

The changes every run makes (its claim, its answer, a requeue between steps) are built through
the ORM once per process and shape, then only given their values (`Shape`): building the
claim's UPDATE cost half a millisecond of a worker's CPU each time, a tenth of a whole run's.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from django.db.models import F, Q, QuerySet
from django.db.models.sql import UpdateQuery

from conversations.batch import Batch, Condition, event_add, run_guard
from conversations.events import EventType
from conversations.fencing import lease_deadline
from conversations.models import TERMINAL_STATUSES, Run, RunStatus
from engine.dispatch import ACTIVE_STATUSES
from platform_site.statements import bound

TRANSITIONS: dict[tuple[str, str], EventType] = {
    (RunStatus.QUEUED, RunStatus.RUNNING): EventType.RUN_RUNNING,
    (RunStatus.RUNNING, RunStatus.RUNNING): EventType.RUN_RUNNING,
    (RunStatus.RUNNING, RunStatus.QUEUED): EventType.RUN_REQUEUED,
    (RunStatus.QUEUED, RunStatus.QUEUED): EventType.RUN_REQUEUED,
    (RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL): EventType.RUN_AWAITING_APPROVAL,
    (RunStatus.AWAITING_APPROVAL, RunStatus.QUEUED): EventType.RUN_QUEUED,
    (RunStatus.RUNNING, RunStatus.AWAITING_CHILDREN): EventType.RUN_AWAITING_CHILDREN,
    (RunStatus.AWAITING_CHILDREN, RunStatus.QUEUED): EventType.RUN_QUEUED,
    **{(source, end): EventType.run_ended(end) for source in ACTIVE_STATUSES for end in TERMINAL_STATUSES},
    (RunStatus.FAILED, RunStatus.QUEUED): EventType.RUN_RETRIED,
}
# Leaving a terminal state takes a person: the edge is refused without `by`.
OPERATOR_ONLY = frozenset({(RunStatus.FAILED, RunStatus.QUEUED)})


class TransitionRefused(Exception):
    """A status change the table does not allow (a bug in the caller, not a race)."""


def transition_event(*, source: str, to: str, by=None) -> EventType:
    """The event of the change source → to; TransitionRefused if the table has no such change."""
    event = TRANSITIONS.get((source, to))
    if event is None:
        raise TransitionRefused(f"a run cannot go from {source} to {to}")
    if (source, to) in OPERATOR_ONLY and by is None:
        raise TransitionRefused(f"only an operator can move a run from {source} to {to}")
    return event


def run_transition(*, asynchronous_commit: bool = False, **change) -> bool:
    """Move the run to `to` if its status is one of `expect`; True if it moved.

    `owner`: entering running, the worker that takes the lease; leaving running, the worker that
    must hold it (a fence: a stale holder moves nothing). `where` narrows the UPDATE further
    (a lapsed lease, an admitted run). `fields` are written with the status (stop reason, counters).
    `writes` add writes (without events) to the change's batch: they take effect only if the
    UPDATE matched, together with it (run_finish closing the run's open calls). The batch's guard,
    named "run", returns the run's id, event_seq, conversation_id and parent_run_id. `by`, the person, is what
    allows the operator-only change. `shape` instead of `where` and `fields`: they are built from
    `values` by the shape, and the UPDATE is built once per shape and change (Shape). `listening`:
    whether a webhook hears the run, if the caller read it already (conversations.batch.event_add).
    `asynchronous_commit`: conversations.batch says when it may be asked.
    """
    return _transition_batch(**change).execute(asynchronous_commit=asynchronous_commit) is not None


def transition_guard(
    batch: Batch,
    *,
    run_id,
    to: str,
    owner: str,
    fields: dict,
    sets: Mapping[str, object] | None = None,
    where: tuple[Condition, ...] = (),
    returning: tuple[str, ...] = (),
) -> EventType:
    """The holder's change running → `to` as the guard of `batch`, a batch it builds with more
    writes (conversations.batch.run_guard: `owner` must hold the lease; `sets`, `where` and
    `returning` as there): one UPDATE that also writes the status, clears the lease and writes
    `fields` (field: value). Returns the change's event, which the caller adds after the batch's
    other events (its guard bumps the sequence by all of them)."""
    event = transition_event(source=RunStatus.RUNNING, to=to)
    assignments = {**(sets or {}), "status": to, "lease_owner": "", "lease_expires_at": None, **fields}
    run_guard(
        batch,
        run_id=run_id,
        lease_owner=owner,
        extends_lease=False,
        sets=assignments,
        where=where,
        returning=tuple(dict.fromkeys(("conversation_id", "parent_run_id", *returning))),
    )
    return event


def _transition_batch(
    *,
    run_id,
    to: str,
    expect: Iterable[str],
    owner: str | None = None,
    where: Q | None = None,
    by=None,
    payload: dict | None = None,
    fields: dict | None = None,
    writes: Callable[[Batch], None] | None = None,
    shape: "Shape | None" = None,
    values: dict | None = None,
    returning: tuple[str, ...] = (),
    listening: bool | None = None,
) -> Batch:
    """The change's batch (run_transition says what each argument does); its guard, named "run",
    also returns the run's `returning` columns."""
    expect = tuple(expect)
    if not expect:
        raise TransitionRefused("a transition needs the statuses it may start from")
    events = {transition_event(source=source, to=to, by=by) for source in expect}
    if len(events) != 1:
        # One UPDATE cannot tell which source it matched; the event would be a guess.
        raise TransitionRefused(f"{', '.join(expect)} → {to} are different changes; make one at a time")
    if to == RunStatus.RUNNING and not owner:
        raise TransitionRefused("a run enters running only with the worker that holds it")
    if shape is not None and (where is not None or fields is not None):
        raise TransitionRefused("a shaped change builds its own where and fields")
    if shape is None and where is None and fields is None:
        shape = _PLAIN
    named = {"run_id": Run._meta.pk.to_python(run_id), **(values or {})}
    if owner:
        named["owner"] = owner
    if to == RunStatus.RUNNING:
        named["lease"] = lease_deadline()
    change = _Change(to=to, expect=expect, owner=bool(owner), where=where, fields=fields, shape=shape)
    if shape is None:
        sql, params = change.sql(named)
    else:
        sql, params = bound(("run transition", shape, to, expect, bool(owner)), change.sql, named)
    batch = Batch()
    guard = ("id", "event_seq", "conversation_id", "parent_run_id")
    batch.add("run", sql, params, (*guard, *(column for column in returning if column not in guard)))
    if writes is not None:
        writes(batch)
    event_add(batch, run_id=run_id, type=events.pop(), payload=payload or {}, listening=listening)
    return batch


@dataclass(frozen=True)
class Shape:
    """A change whose UPDATE has the same form at every call: `where` and `fields` are built
    from the call's values (keyword arguments), which differ from call to call. The run's id,
    `owner` and the lease's deadline are values too (platform_site.statements says what a value
    may be)."""

    name: str
    where: Callable[..., Q] | None = None
    fields: Callable[..., dict] | None = None


# A change with no `where` and no `fields`: the run's id, the owner and the lease are its values.
_PLAIN = Shape("plain")


@dataclass(frozen=True)
class _Change:
    to: str
    expect: tuple
    owner: bool
    where: Q | None
    fields: dict | None
    shape: Shape | None

    def sql(self, named: dict) -> tuple[str, tuple]:
        """The change's UPDATE for these values, built through the ORM."""
        values = {key: value for key, value in named.items() if key not in ("run_id", "owner", "lease")}
        where, fields = self.where, dict(self.fields or {})
        if self.shape is not None:
            where = self.shape.where(**values) if self.shape.where else None
            fields = self.shape.fields(**values) if self.shape.fields else {}
        if self.to == RunStatus.RUNNING:
            fields.update(lease_owner=named["owner"], lease_expires_at=named["lease"])
        else:
            fields.update(lease_owner="", lease_expires_at=None)
        runs = Run.objects.filter(pk=named["run_id"], status__in=self.expect)
        if self.owner and self.to != RunStatus.RUNNING:
            runs = runs.filter(lease_owner=named["owner"])
        if where is not None:
            runs = runs.filter(where)
        return _update_sql(runs, {**fields, "status": self.to, "event_seq": F("event_seq") + 1})


def _update_sql(runs: QuerySet, values: dict) -> tuple[str, tuple]:
    """`runs.update(**values)` as SQL and parameters, to be the guard of a batch."""
    query = runs.query.chain(UpdateQuery)
    query.add_update_values(values)
    return query.get_compiler(runs.db).as_sql()
