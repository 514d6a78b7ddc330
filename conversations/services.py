"""Writes on conversations and runs. Every state change of a run goes through here."""

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agents.models import Agent, ConcurrentMessages
from agents.services import agent_version_current
from conversations.models import (
    TERMINAL_STATUSES,
    Approval,
    Conversation,
    LLMCall,
    Message,
    Run,
    RunEvent,
    RunRequest,
    RunStatus,
    StopReason,
    ToolInvocation,
)
from conversations.wakeups import publish_run_event
from conversations.webhooks import WEBHOOK_EVENT_TYPES, webhook_deliveries_create
from platform_site.text import scrub_nul
from tools.arguments import parse_arguments
from tools.calls import call_arguments, call_name

log = logging.getLogger(__name__)

ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)


def _bump(model, pk, field: str, by: int = 1) -> int:
    """Atomically add `by` to a counter column and return the new value, in one statement.

    The row lock it takes is held to the end of the caller's transaction, which is what
    serialises concurrent writers of message orders and event sequence numbers.
    """
    table = model._meta.db_table
    column = model._meta.get_field(field).column
    key = model._meta.pk.get_db_prep_value(pk, connection)
    pk_column = model._meta.pk.column
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{table}" SET "{column}" = "{column}" + %s WHERE "{pk_column}" = %s RETURNING "{column}"',
            [by, key],
        )
        row = cursor.fetchone()
    if row is None:
        raise model.DoesNotExist(f"{model.__name__} {pk} does not exist")
    return row[0]


def _event_insert(*, run_id, type: str, payload: dict, lease_owner: str | None) -> RunEvent | None:
    """Next sequence number and the event row; on PostgreSQL in one statement (a data-modifying
    CTE), since every step writes events and each round trip counts at hundreds of runs."""
    from agents.leases import lease_deadline

    now = timezone.now()
    run_pk = Run._meta.pk.get_db_prep_value(run_id, connection)
    fence_set, fence_where, fence_params = "", "", []
    if lease_owner is not None:
        fence_set, fence_where = ', "lease_expires_at" = %s', ' AND "lease_owner" = %s AND "status" = %s'
        fence_params = [lease_deadline(), run_pk, lease_owner, RunStatus.RUNNING]
    else:
        fence_params = [run_pk]
    bump = f'UPDATE "conversations_run" SET "event_seq" = "event_seq" + 1{fence_set} WHERE "id" = %s{fence_where}'
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f'WITH bumped AS ({bump} RETURNING "id", "event_seq") '
                'INSERT INTO "conversations_runevent" ("run_id", "seq", "type", "payload", "created_at") '
                'SELECT "id", "event_seq", %s, %s::jsonb, %s FROM bumped RETURNING "id", "seq"',
                [*fence_params, type, json.dumps(payload), now],
            )
            row = cursor.fetchone()
            if row is None:
                return None
            event = RunEvent(id=row[0], run_id=run_id, seq=row[1], type=type, payload=payload, created_at=now)
            event._state.adding = False
            return event
        cursor.execute(f'{bump} RETURNING "event_seq"', fence_params)
        row = cursor.fetchone()
    if row is None:
        return None
    return RunEvent.objects.create(run_id=run_id, seq=row[0], type=type, payload=payload)


def run_event_append(*, run_id, type: str, payload: dict | None = None, lease_owner: str | None = None) -> RunEvent:
    """Append an event to the run's timeline.

    With `lease_owner`, the same statement checks that this worker still holds the run's lease
    and extends it, so a step's commit is fenced at no extra cost (LeaseLost otherwise).
    """
    from agents.leases import LeaseLost

    with transaction.atomic(savepoint=False):
        event = _event_insert(run_id=run_id, type=type, payload=payload or {}, lease_owner=lease_owner)
        if event is None:
            if lease_owner is not None:
                raise LeaseLost(str(run_id))
            raise Run.DoesNotExist(f"Run {run_id} does not exist")
        if type in WEBHOOK_EVENT_TYPES:
            webhook_deliveries_create(event=event)
        # Streams read rows; the wake-up only tells them to look, once the row is visible.
        transaction.on_commit(partial(publish_run_event, run_id), robust=True)
    return event


def messages_append(*, conversation_id, run_id, messages: list[dict]) -> list[Message]:
    """Append messages (dicts of Message fields) in order, in the caller's transaction."""
    with transaction.atomic(savepoint=False):
        last = _bump(Conversation, conversation_id, "message_count", len(messages))
        first = last - len(messages) + 1
        rows = [
            Message(conversation_id=conversation_id, run_id=run_id, order=first + i, **fields)
            for i, fields in enumerate(messages)
        ]
        return Message.objects.bulk_create(rows)


def conversation_create(*, agent: Agent, owner=None, title: str = "", metadata: dict | None = None) -> Conversation:
    return Conversation.objects.create(agent=agent, owner=owner, title=title[:200], metadata=metadata or {})


class ConversationBusy(Exception):
    """The agent rejects concurrent messages and the conversation has an active run."""

    def __init__(self, run: Run):
        super().__init__(f"conversation has an active run {run.pk} ({run.status})")
        self.run = run


class IdempotencyKeyReused(Exception):
    """The idempotency key was first used with other content."""


@dataclass
class Submission:
    run: Run
    replayed: bool = False


def _content_hash(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def run_enqueue(*, run_id) -> None:
    """Hand the run to a worker once the caller's transaction commits (with its id only).

    A message can still be lost after that (a broker restart, a worker killed holding it
    prefetched); `enqueued_at` lets the sweeper hand a run that stayed queued again.
    """
    from agents.tasks import run_advance_task

    Run.objects.filter(pk=run_id).update(enqueued_at=timezone.now())
    transaction.on_commit(partial(_send_run, run_advance_task, run_id))


def _send_run(task, run_id) -> None:
    # The run is committed, so the request has succeeded whatever the broker says: an
    # unreachable broker (any transport's error) is logged, and the sweeper sends the run
    # again from `enqueued_at` once the broker is back.
    try:
        task.delay(str(run_id))
    except Exception:
        log.exception("run %s committed but not sent to the broker; the sweeper will send it again", run_id)


def _admit(run: Run, content: str) -> None:
    """Give the run its user message and hand it to a worker once this transaction commits."""
    messages_append(
        conversation_id=run.conversation_id, run_id=run.pk,
        messages=[{"role": Message.Role.USER, "content": content}],
    )
    run_enqueue(run_id=run.pk)


def message_submit(*, conversation: Conversation, content: str, user=None, idempotency_key: str = "") -> Submission:
    """A user message and the run that answers it, decided under a lock on the conversation.

    While another run of the conversation is active, the agent's policy applies: reject
    (ConversationBusy), enqueue (the new run waits and is admitted when the active one ends),
    or interrupt (the active runs are cancelled after commit; the new run waits for them to stop).
    The same idempotency key from the same user returns the run it first created.
    """
    digest = _content_hash(content)
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update(no_key=True).select_related("agent").get(pk=conversation.pk)
        if idempotency_key:
            previous = RunRequest.objects.filter(
                conversation=conversation, user=user, idempotency_key=idempotency_key
            ).select_related("run").first()
            if previous is not None:
                if previous.content_hash != digest:
                    raise IdempotencyKeyReused(idempotency_key)
                return Submission(previous.run, replayed=True)
        active = list(Run.objects.filter(conversation=conversation, status__in=ACTIVE_STATUSES).order_by("created_at"))
        policy = conversation.agent.concurrent_messages
        if active and policy == ConcurrentMessages.REJECT:
            raise ConversationBusy(active[0])
        version = agent_version_current(agent=conversation.agent)
        timeout = version.snapshot["agent"].get("run_timeout_seconds")
        run = Run.objects.create(
            conversation=conversation, agent_id=conversation.agent_id, agent_version=version,
            deadline=timezone.now() + timedelta(seconds=timeout) if timeout else None,
        )
        RunRequest.objects.create(run=run, conversation=conversation, user=user, content=content,
                                  idempotency_key=idempotency_key, content_hash=digest)
        payload = {"agent_version": version.number}
        if active:
            payload["waiting_for"] = [str(r.pk) for r in active]
        run_event_append(run_id=run.pk, type="run.queued", payload=payload)
        if not active:
            _admit(run, content)
        elif policy == ConcurrentMessages.INTERRUPT:
            # After commit and outside the conversation lock: the engine locks a run, then its
            # conversation, so cancelling here could deadlock with a step being recorded.
            ids = [r.pk for r in active]
            transaction.on_commit(lambda: runs_interrupt(run_ids=ids, by=user), robust=True)
    return Submission(run)


def message_post(*, conversation: Conversation, content: str, user=None, idempotency_key: str = "") -> Run:
    return message_submit(conversation=conversation, content=content, user=user, idempotency_key=idempotency_key).run


def runs_interrupt(*, run_ids, by=None) -> None:
    for run in Run.objects.filter(pk__in=run_ids, status__in=ACTIVE_STATUSES):
        run_cancel(run=run, by=by)


def _admitted():
    return Exists(Message.objects.filter(run_id=OuterRef("pk")))


def conversation_admit_next(*, conversation_id) -> Run | None:
    """Admit the conversation's earliest waiting run once no admitted run is active."""
    waiting = Run.objects.filter(conversation_id=conversation_id, status=RunStatus.QUEUED).exclude(_admitted())
    if not waiting.exists():
        return None
    with transaction.atomic():
        Conversation.objects.select_for_update(no_key=True).filter(pk=conversation_id).first()
        active = Run.objects.filter(conversation_id=conversation_id, status__in=ACTIVE_STATUSES)
        if active.filter(_admitted()).exists():
            return None
        run = waiting.select_related("request").order_by("request__id").first()
        if run is not None:
            _admit(run, run.request.content)
        return run


def run_finish(*, run_id, status: str, stop_reason: str, error: str = "", final_message: str | None = None) -> bool:
    """Move a run to a terminal state, once. Returns False if it already was terminal.

    A run whose cancel was accepted (202) ends cancelled, whatever the step that ends it found:
    an answer that arrived after the cancel stays in the ledger but is not the run's answer.
    The ending it replaced is recorded in the event."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_STATUSES:
            return False
        payload = {"stop_reason": stop_reason, "error": error}
        if run.cancel_requested and status != RunStatus.CANCELLED:
            payload = {"stop_reason": StopReason.CANCELLED, "error": "", "instead_of": stop_reason}
            status, stop_reason, error, final_message = RunStatus.CANCELLED, StopReason.CANCELLED, "", None
        if final_message is not None:
            messages_append(
                conversation_id=run.conversation_id, run_id=run.pk,
                messages=[{"role": Message.Role.ASSISTANT, "content": final_message}],
            )
        now = timezone.now()
        updated = Run.objects.filter(pk=run_id).exclude(status__in=TERMINAL_STATUSES).update(
            status=status, stop_reason=stop_reason, error=error, finished_at=now,
            lease_owner="", lease_expires_at=None,
        )
        if updated:
            if stop_reason != StopReason.FINAL_ANSWER:  # a final answer has no calls left to record
                _unrecorded_calls_record(run=run, status=status, now=now)
            _open_calls_close(run_id=run_id, status=status, now=now)
            run_event_append(run_id=run_id, type=f"run.{status}", payload=payload)
            transaction.on_commit(partial(conversation_admit_next, conversation_id=run.conversation_id), robust=True)
        return bool(updated)


def _unrecorded_calls_record(*, run: Run, status: str, now) -> None:
    """Tool calls of the run's last step that never got a row (the run ended while the model was
    answering, or before the step took them) are recorded as cancelled, with the arguments as the
    model gave them, so every tool call in the ledger has its invocation row. Earlier steps' calls
    all have rows: a model is called only after the previous step's calls were answered."""
    last = (Message.objects.filter(run_id=run.pk, role=Message.Role.ASSISTANT, tool_calls__isnull=False)
            .order_by("-order").only("tool_calls", "llm_call_id").first())
    if last is None or last.llm_call_id is None:  # a row needs the call that asked for it
        return
    ids = [call["id"] for call in last.tool_calls]
    recorded = set(ToolInvocation.objects.filter(run_id=run.pk, tool_call_id__in=ids)
                   .values_list("tool_call_id", flat=True))
    missing = [(position, call) for position, call in enumerate(last.tool_calls) if call["id"] not in recorded]
    if not missing:
        return
    tool_ids = {tool["name"]: tool["id"] for tool in run.agent_version.snapshot["tools"]}
    rows = []
    for position, call in missing:
        name, _ = call_name(call)
        raw = call_arguments(call)
        rows.append(ToolInvocation(
            run_id=run.pk, tool_call_id=call["id"], llm_call_id=last.llm_call_id, tool_id=tool_ids.get(name),
            tool_name=name, position=position, raw_arguments=raw, arguments=scrub_nul(parse_arguments(raw).arguments),
            status=ToolInvocation.Status.CANCELLED, error=f"run {status}", finished_at=now,
            idempotency_key=f"{run.pk}:{call['id']}",
        ))
    ToolInvocation.objects.bulk_create(rows, ignore_conflicts=True)


def _open_calls_close(*, run_id, status: str, now) -> None:
    """An ended run leaves nothing waiting: its pending approvals are cancelled (each with an
    event), its calls that never ran are marked cancelled, and the attempts a dead worker left
    open (a model call, a tool call) are closed as interrupted. A worker that is in fact still
    in such a call cannot record it any more: its lease fence fails on the ended run."""
    pending = Approval.objects.filter(run_id=run_id, status=Approval.Status.PENDING).select_related("invocation")
    for approval in pending:
        Approval.objects.filter(pk=approval.pk, status=Approval.Status.PENDING).update(
            status=Approval.Status.CANCELLED, decided_at=now, channel=Approval.Channel.SYSTEM, reason=f"run {status}"
        )
        run_event_append(run_id=run_id, type="approval.cancelled", payload={
            "approval_id": approval.pk, "tool_invocation_id": approval.invocation_id,
            "tool_call_id": approval.tool_call_id, "tool": approval.invocation.tool_name, "reason": f"run {status}",
        })
    ToolInvocation.objects.filter(
        run_id=run_id, status__in=[ToolInvocation.Status.PENDING, ToolInvocation.Status.AWAITING_APPROVAL]
    ).update(status=ToolInvocation.Status.CANCELLED, error=f"run {status}", finished_at=now)
    LLMCall.objects.filter(run_id=run_id, status=LLMCall.Status.STARTED).update(
        status=LLMCall.Status.FAILED, error=f"interrupted: the run was {status} before the call completed",
        finished_at=now,
    )
    ToolInvocation.objects.filter(run_id=run_id, status=ToolInvocation.Status.RUNNING).update(
        status=ToolInvocation.Status.ERROR, error="interrupted", finished_at=now,
        result=f"The run was {status} while this call was running; its outcome is unknown.",
    )


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
        updated = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner).update(
            status=RunStatus.AWAITING_APPROVAL, lease_owner="", lease_expires_at=None
        )
        if updated:
            run_event_append(run_id=run_id, type="run.awaiting_approval")
        return bool(updated)


def run_cancel(*, run: Run, by=None) -> Run:
    """The one way a run is cancelled (API, interrupt, operators). A queued, parked or abandoned
    run (lease lapsed) ends now; a run a live worker holds stops at its next step boundary.
    An ended run is left as it is."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if not run.is_terminal:
            held = (run.status == RunStatus.RUNNING and run.lease_expires_at is not None
                    and run.lease_expires_at > timezone.now())
            actor = {"by": by.get_username(), "by_id": by.pk} if by is not None else {"by": None}
            run_event_append(run_id=run.pk, type="run.cancel_requested", payload=actor)
            if held:
                Run.objects.filter(pk=run.pk).update(cancel_requested=True)
            else:
                run_finish(run_id=run.pk, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
    run.refresh_from_db()
    return run
