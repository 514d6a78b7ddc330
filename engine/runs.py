"""Run status changes: ending a run, parking it for approval, cancelling it.

A run's status is only ever changed by engine.transitions.run_transition, whose docstring is the
table of allowed changes; it is called here (end, park; a cancel ends a run or asks its worker
to stop), in engine.leases (claim) and where a run is handed back to the queue (loop, sweeper,
operations, approvals). conversations.services appends to the ledger and never changes a status."""

from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from conversations import events
from conversations.batch import Batch, Is, Row, Update, db_value, event_add, exists, run_event_append, unheard
from conversations.events import EventType
from conversations.models import (
    TERMINAL_STATUSES,
    Approval,
    LLMCall,
    Message,
    Run,
    RunStatus,
    StopReason,
    ToolInvocation,
)
from conversations.services import messages_append
from engine.delegation import HAS_CHILD, child_ended, delegate_calls_close, may_delegate
from engine.dispatch import ACTIVE_STATUSES, conversation_admit_next
from engine.memory import memory_extract_later
from engine.snapshots import version_snapshot
from engine.tracing import run_trace_end
from engine.transitions import Shape, run_transition, transition_guard
from platform_site.text import scrub_nul
from tools.arguments import parse_arguments
from tools.calls import call_arguments, call_name


def run_finish(
    *,
    run_id,
    status: str,
    stop_reason: str,
    error: str = "",
    final_message: str | None = None,
    listening: bool | None = None,
    made: "AnswerEnding | None" = None,
    output: object = None,
) -> bool:
    """Move a run to a terminal state, once, and do what follows an ending. Returns False if it
    already was terminal.

    A run whose cancel was accepted (202) ends cancelled, whatever the step that ends it found:
    an answer that arrived after the cancel stays in the ledger but is not the run's answer.
    The ending it replaced is recorded in the event.

    The usual ending, an answer with nothing pending, is made in one statement: by the commit
    that records the answer itself when nothing stood in its way (`made`: AnswerEnding; only what
    follows it is left here), else by a statement of its own (_answered). Any other ending takes
    the run's row lock first (_end). Each faster way is tried under a guard that says whether it
    applies, and falls back on the next: what makes an ending the long way (a cancel accepted,
    an approval pending, a webhook listening) can come while the model answers or the ending is
    on its way, so only the statement itself can tell, and a statement whose guard fails writes
    nothing (the answer is then recorded without the ending: engine.model_call._record_success).
    `listening`: whether a webhook hears the run, as the commit of its final answer read it (the
    usual ending then reads nothing more; conversations.batch.event_add). `output`: the final
    answer's parsed value, when it matched the run's output schema (engine.answer_schema)."""
    if made is not None:
        made.follow()
        return True
    if (status, stop_reason, final_message) == (RunStatus.COMPLETED, StopReason.FINAL_ANSWER, None):
        answered = _answered(run_id=run_id, error=error, listening=listening, output=output)
        if answered is not None:
            _answered_follow(run_id, answered)
            return True
    with transaction.atomic():
        conversation_id = _end(
            run_id=run_id, status=status, stop_reason=stop_reason, error=error, final_message=final_message
        )
        if conversation_id is None:
            return False
        transaction.on_commit(partial(conversation_admit_next, conversation_id=conversation_id), robust=True)
        run_trace_end(run_id=run_id)
        return True


# Whether a run of the ending run's conversation waits for its turn: queued, and not admitted
# (admission gives a run its user message). Plain SQL: it is read at the end of every run.
_WAITING_SQL = (
    f'SELECT EXISTS (SELECT 1 FROM "{Run._meta.db_table}" w WHERE w."conversation_id" = '
    f'(SELECT "conversation_id" FROM "{Run._meta.db_table}" WHERE "id" = %s) AND w."status" = %s '
    f'AND NOT EXISTS (SELECT 1 FROM "{Message._meta.db_table}" m WHERE m."run_id" = w."id")) AS "waiting"'
)


def _answered_follow(run_id, answered: tuple[object, bool, object, int, dict | None]) -> None:
    """What follows the usual ending once it committed, given the run's conversation id, whether
    a run of the conversation waits for its turn, the run's parent's id, its version's id and its
    evaluation's tool results (the last two for its memory extraction)."""
    conversation_id, waiting, parent_run_id, version_id, sandbox = answered
    memory_extract_later(run_id=run_id, version_id=version_id, sandbox=sandbox)
    if waiting:
        transaction.on_commit(partial(conversation_admit_next, conversation_id=conversation_id), robust=True)
    if parent_run_id is not None:  # a delegated run: its answer is its parent's tool result
        child_ended(parent_run_id=parent_run_id, child_run_id=run_id)
    run_trace_end(run_id=run_id)


def _answered_found(ended: list):
    """The callback that keeps what _answered_follow needs from the ending batch's results."""
    return lambda results: ended.append(
        (
            results["run"]["conversation_id"],
            bool(results["waiting"]["waiting"]),
            results["run"]["parent_run_id"],
            results["run"]["agent_version_id"],
            results["run"]["sandbox"],
        )
    )


# What the usual ending returns besides, for the memory extraction that follows it (the commit
# of a final answer returns them with conversations.selectors.STEP_RUN_COLUMNS).
_EXTRACTION_COLUMNS = ("agent_version_id", "sandbox")


def _answered(
    *, run_id, error: str, listening: bool | None, output: object = None
) -> tuple[object, bool, object, int, dict | None] | None:
    """The usual ending in one statement: a run that answered ends completed, unless a cancel was
    accepted or an approval is pending (both need the long way: a different ending, events for
    the approvals). A final answer leaves no call unrecorded; what a dead worker left open is
    closed with it. Returns the run's conversation id and whether a run of the conversation waits
    for its turn (read in the same statement; a post committing while it runs is admitted by the
    sweeper) and its parent run's id (None unless it is a delegated run), or None if the run did
    not end here."""
    now = timezone.now()
    ended = []

    def writes(batch: Batch) -> None:
        _open_calls_close(batch, run_id=run_id, status=RunStatus.COMPLETED, now=now)
        batch.read("waiting", _WAITING_SQL, [db_value(Run, "id", run_id), RunStatus.QUEUED], ("waiting",))
        batch.after(_answered_found(ended))

    # An answer's parsed value is JSON, which a shaped change cannot bind: that ending's UPDATE is
    # built each time (a run with an output schema).
    change = (
        {"shape": _ANSWERED, "values": {"error": error, "now": now}}
        if output is None
        else {"where": _ANSWERED.where(error, now), "fields": {**_ANSWERED.fields(error, now), "output_parsed": output}}
    )
    run_transition(
        run_id=run_id,
        to=RunStatus.COMPLETED,
        expect=ACTIVE_STATUSES,
        **change,
        payload=events.run_ended(stop_reason=StopReason.FINAL_ANSWER, error=error),
        writes=writes,
        listening=listening,
        returning=_EXTRACTION_COLUMNS,
    )
    return ended[0] if ended else None


# The usual ending's change: no cancel accepted, no approval pending.
_ANSWERED = Shape(
    "answered",
    where=lambda error, now: (
        Q(cancel_requested=False)
        & ~Exists(Approval.objects.filter(run_id=OuterRef("pk"), status=Approval.Status.PENDING))
    ),
    fields=lambda error, now: {"stop_reason": StopReason.FINAL_ANSWER, "error": error, "finished_at": now},
)


# The usual ending's conditions on the run's row, for the guard of a final answer's commit
# (AnswerEnding): as _ANSWERED, and no run-event listener hears the run (conversations.batch.unheard:
# a webhook's deliveries are written in the ending's transaction, which a one-statement commit
# does not have: a run with one ends the usual way, in a statement after the answer's).
_ANSWER_ENDS = (
    Is("cancel_requested", False),
    ~exists(Approval, run_id=Row("id"), status=Approval.Status.PENDING),
)


@dataclass
class AnswerEnding:
    """The usual ending made by the commit that records the run's final answer (engine.llm_step),
    instead of by a statement of its own after it: the commit's guard is the change running →
    completed (`guard`, for engine.model_call), its writes those of _answered (`writes`), and the
    commit is synchronous, as the ending's is. The guard matches only if the ending would be the
    usual one; if it does not, the answer is recorded again without it and run_finish ends the run
    as before. Once the commit is made, `follow` does what follows the ending."""

    run_id: object
    owner: str
    now: datetime = field(default_factory=timezone.now)
    # The answer's parsed value, when it matched the run's output schema (engine.answer_schema).
    output: object = None
    _event: EventType | None = None
    _ended: list = field(default_factory=list)

    def guard(self, batch: Batch, *, sets: dict[str, object], returning: tuple[str, ...]) -> None:
        self._event = transition_guard(
            batch,
            run_id=self.run_id,
            to=RunStatus.COMPLETED,
            owner=self.owner,
            fields={
                "stop_reason": StopReason.FINAL_ANSWER,
                "error": "",
                "finished_at": self.now,
                **({"output_parsed": self.output} if self.output is not None else {}),
            },
            sets=sets,
            where=(*_ANSWER_ENDS, *unheard()),
            returning=returning,
        )

    def writes(self, batch: Batch, *, call_id) -> None:
        """The ending's writes, after the answer's (its event is the batch's last)."""
        _open_calls_close(batch, run_id=self.run_id, status=RunStatus.COMPLETED, now=self.now, answering=call_id)
        batch.read("waiting", _WAITING_SQL, [db_value(Run, "id", self.run_id), RunStatus.QUEUED], ("waiting",))
        payload = events.run_ended(stop_reason=StopReason.FINAL_ANSWER, error="")
        event_add(batch, run_id=self.run_id, type=self._event, payload=payload, listening=False)
        batch.durable = True
        batch.after(_answered_found(self._ended))

    def follow(self) -> None:
        _answered_follow(self.run_id, self._ended[0])


def _end(*, run_id, status: str, stop_reason: str, error: str, final_message: str | None):
    """run_finish under the run's row lock, which orders it against decisions and cancels.
    Returns the run's conversation id, or None if the run had already ended."""
    run = (
        Run.objects.select_for_update()
        .only("status", "cancel_requested", "conversation", "agent_version", "parent_run", "sandbox")
        .get(pk=run_id)
    )
    if run.status in TERMINAL_STATUSES:
        return None
    payload = events.run_ended(stop_reason=stop_reason, error=error)
    if run.cancel_requested and status != RunStatus.CANCELLED:
        payload = events.run_ended(stop_reason=StopReason.CANCELLED, instead_of=stop_reason)
        status, stop_reason, error, final_message = RunStatus.CANCELLED, StopReason.CANCELLED, "", None
    if final_message is not None:
        messages_append(
            conversation_id=run.conversation_id,
            run_id=run.pk,
            messages=[{"role": Message.Role.ASSISTANT, "content": final_message}],
        )
    now = timezone.now()
    if stop_reason != StopReason.FINAL_ANSWER:  # a final answer has no calls left to record
        _unrecorded_calls_record(run=run, status=status, now=now)
    # Under the lock the run is still active, so the change below is made: the approvals'
    # events may come first, as they must on the timeline.
    _approvals_cancel(run_id=run_id, status=status, now=now)
    delegates = may_delegate(version_snapshot(run.agent_version_id))
    run_transition(
        run_id=run_id,
        to=status,
        expect=ACTIVE_STATUSES,
        payload=payload,
        writes=partial(_open_calls_close, run_id=run_id, status=status, now=now, delegates=delegates),
        fields={"stop_reason": stop_reason, "error": error, "finished_at": now},
    )
    # Agents as tools: a delegated run's end reaches its parent; an ended run's active children
    # are cancelled once this commits (a child's end locks the child, then its parent). Only a
    # run whose version has delegates can have children (its snapshot is cached).
    if run.parent_run_id is not None:
        child_ended(parent_run_id=run.parent_run_id, child_run_id=run_id)
    if delegates:
        transaction.on_commit(partial(_children_cancel, run_id=run_id), robust=True)
    if status == RunStatus.COMPLETED:
        memory_extract_later(run_id=run_id, version_id=run.agent_version_id, sandbox=run.sandbox)
    return run.conversation_id


def _children_cancel(*, run_id) -> None:
    """Cancel the ended run's delegated runs still active; each cancels its own in turn."""
    for child in Run.objects.filter(parent_run_id=run_id, status__in=ACTIVE_STATUSES).only("pk"):
        run_cancel(run=child)


def _unrecorded_calls_record(*, run: Run, status: str, now) -> None:
    """Tool calls of the run's last step that never got a row (the run ended while the model was
    answering, or before the step took them) are recorded as cancelled, with the arguments as the
    model gave them, so every tool call in the ledger has its invocation row. Earlier steps' calls
    all have rows: a model is called only after the previous step's calls were answered."""
    last = (
        Message.objects.filter(run_id=run.pk, role=Message.Role.ASSISTANT, tool_calls__isnull=False)
        .order_by("-order")
        .only("tool_calls", "llm_call_id")
        .first()
    )
    if last is None or last.llm_call_id is None:  # a row needs the call that asked for it
        return
    ids = [call["id"] for call in last.tool_calls]
    recorded = set(
        ToolInvocation.objects.filter(run_id=run.pk, tool_call_id__in=ids).values_list("tool_call_id", flat=True)
    )
    missing = [(position, call) for position, call in enumerate(last.tool_calls) if call["id"] not in recorded]
    if not missing:
        return
    tool_ids = {tool["name"]: tool["id"] for tool in version_snapshot(run.agent_version_id)["tools"]}
    rows = []
    for position, call in missing:
        name, _ = call_name(call)
        raw = call_arguments(call)
        rows.append(
            ToolInvocation(
                run_id=run.pk,
                tool_call_id=call["id"],
                llm_call_id=last.llm_call_id,
                tool_id=tool_ids.get(name),
                tool_name=name,
                position=position,
                raw_arguments=raw,
                arguments=scrub_nul(parse_arguments(raw).arguments),
                status=ToolInvocation.Status.CANCELLED,
                error=f"run {status}",
                finished_at=now,
                idempotency_key=f"{run.pk}:{call['id']}",
            )
        )
    ToolInvocation.objects.bulk_create(rows, ignore_conflicts=True)


def _approvals_cancel(*, run_id, status: str, now) -> None:
    """An ended run leaves nothing waiting: its pending approvals are cancelled, each with an
    event (the run's row lock is held)."""
    pending = Approval.objects.filter(run_id=run_id, status=Approval.Status.PENDING).select_related("invocation")
    for approval in pending:
        Approval.objects.filter(pk=approval.pk, status=Approval.Status.PENDING).update(
            status=Approval.Status.CANCELLED, decided_at=now, channel=Approval.Channel.SYSTEM, reason=f"run {status}"
        )
        run_event_append(
            run_id=run_id,
            type=EventType.APPROVAL_CANCELLED,
            payload=events.approval_cancelled(
                approval_id=approval.pk,
                tool_invocation_id=approval.invocation_id,
                tool_call_id=approval.tool_call_id,
                tool=approval.invocation.tool_name,
                reason=f"run {status}",
            ),
        )


def _open_calls_close(batch: Batch, *, run_id, status: str, now, answering=None, delegates=False) -> None:
    """With the change that ends the run (writes of its batch): its calls that never ran are
    marked cancelled, and the attempts a dead worker left open (a model call, a tool call) are
    closed as interrupted. A worker that is in fact still in such a call cannot record it any
    more: its lease fence fails on the ended run. `answering`: the model call whose completion
    the same batch writes (AnswerEnding), not one left open (in one statement both writes see it
    started, and a row must not be updated twice). `delegates`: the run's version lists delegates,
    whose calls still running are cancelled with it (engine.delegation.delegate_calls_close)."""
    never_ran = Update(ToolInvocation).set(
        status=ToolInvocation.Status.CANCELLED, error=f"run {status}", finished_at=now
    )
    waiting = (ToolInvocation.Status.PENDING, ToolInvocation.Status.AWAITING_APPROVAL)
    batch.add("cancelled_calls", never_ran.where(run_id=run_id, status__in=waiting))
    attempts = Update(LLMCall).set(
        status=LLMCall.Status.FAILED,
        error=f"interrupted: the run was {status} before the call completed",
        finished_at=now,
    )
    attempts = attempts.where(run_id=run_id, status=LLMCall.Status.STARTED)
    if answering is not None:
        attempts = attempts.where(id__ne=answering)
    batch.add("interrupted_attempts", attempts)
    running = Update(ToolInvocation).set(
        status=ToolInvocation.Status.ERROR,
        error="interrupted",
        finished_at=now,
        result=f"The run was {status} while this call was running; its outcome is unknown.",
    )
    running = running.where(run_id=run_id, status=ToolInvocation.Status.RUNNING)
    # Only a run that may have started children (the usual ending never has one still running).
    if delegates:
        delegate_calls_close(batch, run_id=run_id, status=status, now=now)
        running = running.where(~HAS_CHILD)
    batch.add("interrupted_calls", running)


def run_park_for_approval(*, run_id, owner: str) -> bool:
    """Park a running run until its pending approvals are decided. Returns False (and leaves the
    run running) when there is nothing left to wait for: the approvals were decided while the
    step still ran, and the decision could not requeue a run that was not parked yet."""
    with transaction.atomic():
        # The run's row lock orders this against approval_decide, which locks the run first too.
        run = Run.objects.select_for_update().filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner).first()
        # A run whose cancel was accepted is not parked: its next step ends it (and the approvals).
        if run is None or run.cancel_requested:
            return False
        if not Approval.objects.filter(run_id=run_id, status=Approval.Status.PENDING).exists():
            return False
        return run_transition(
            run_id=run_id,
            to=RunStatus.AWAITING_APPROVAL,
            expect=[RunStatus.RUNNING],
            owner=owner,
            payload=events.run_awaiting_approval(),
        )


def run_cancel(*, run: Run, by=None) -> Run:
    """The one way a run is cancelled (API, interrupt, operators). A queued, parked or abandoned
    run (lease lapsed) ends now; a run a live worker holds stops at its next step boundary.
    An ended run is left as it is."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if not run.is_terminal:
            held = (
                run.status == RunStatus.RUNNING
                and run.lease_expires_at is not None
                and run.lease_expires_at > timezone.now()
            )
            by_name, by_id = (by.get_username(), by.pk) if by is not None else (None, None)
            run_event_append(
                run_id=run.pk,
                type=EventType.RUN_CANCEL_REQUESTED,
                payload=events.run_cancel_requested(by=by_name, by_id=by_id),
            )
            if held:
                Run.objects.filter(pk=run.pk).update(cancel_requested=True)
            else:
                run_finish(run_id=run.pk, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
    run.refresh_from_db()
    return run
