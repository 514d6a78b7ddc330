"""Writes on conversations and runs. Every state change of a run goes through here."""

from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from agents.models import Agent
from agents.services import agent_version_current
from conversations.models import (
    TERMINAL_STATUSES,
    Approval,
    Conversation,
    Message,
    Run,
    RunEvent,
    RunStatus,
    StopReason,
    ToolInvocation,
)


def _bump(model, pk, field: str, by: int = 1) -> int:
    """Atomically add `by` to a counter column and return the new value, in one statement.

    The row lock it takes is held to the end of the caller's transaction, which is what
    serialises concurrent writers of message orders and event sequence numbers.
    """
    table = model._meta.db_table
    column = model._meta.get_field(field).column
    key = model._meta.pk.get_db_prep_value(pk, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{table}" SET "{column}" = "{column}" + %s WHERE "{model._meta.pk.column}" = %s RETURNING "{column}"',
            [by, key],
        )
        row = cursor.fetchone()
    if row is None:
        raise model.DoesNotExist(f"{model.__name__} {pk} does not exist")
    return row[0]


def run_event_append(*, run_id, type: str, payload: dict | None = None) -> RunEvent:
    with transaction.atomic():
        seq = _bump(Run, run_id, "event_seq")
        return RunEvent.objects.create(run_id=run_id, seq=seq, type=type, payload=payload or {})


def messages_append(*, conversation_id, run_id, messages: list[dict]) -> list[Message]:
    """Append messages (dicts of Message fields) in order, in the caller's transaction."""
    with transaction.atomic():
        last = _bump(Conversation, conversation_id, "message_count", len(messages))
        first = last - len(messages) + 1
        rows = [
            Message(conversation_id=conversation_id, run_id=run_id, order=first + i, **fields)
            for i, fields in enumerate(messages)
        ]
        return Message.objects.bulk_create(rows)


def conversation_create(*, agent: Agent, owner=None, title: str = "", metadata: dict | None = None) -> Conversation:
    return Conversation.objects.create(agent=agent, owner=owner, title=title[:200], metadata=metadata or {})


def message_post(*, conversation: Conversation, content: str) -> Run:
    """A user message and the run that answers it, in one transaction; the run is enqueued
    only after commit, with its id alone, so a worker never sees a run that does not exist."""
    from agents.tasks import run_advance_task

    with transaction.atomic():
        version = agent_version_current(agent=conversation.agent)
        timeout = version.snapshot["agent"].get("run_timeout_seconds")
        run = Run.objects.create(
            conversation=conversation, agent_id=conversation.agent_id, agent_version=version,
            deadline=timezone.now() + timedelta(seconds=timeout) if timeout else None,
        )
        messages_append(
            conversation_id=conversation.pk, run_id=run.pk,
            messages=[{"role": Message.Role.USER, "content": content}],
        )
        run_event_append(run_id=run.pk, type="run.queued", payload={"agent_version": version.number})
        transaction.on_commit(lambda: run_advance_task.delay(str(run.pk)))
    return run


def run_finish(*, run_id, status: str, stop_reason: str, error: str = "", final_message: str | None = None) -> bool:
    """Move a run to a terminal state, once. Returns False if it already was terminal."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_STATUSES:
            return False
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
            _open_calls_close(run_id=run_id, status=status, now=now)
            run_event_append(run_id=run_id, type=f"run.{status}", payload={"stop_reason": stop_reason, "error": error})
        return bool(updated)


def _open_calls_close(*, run_id, status: str, now) -> None:
    """An ended run leaves nothing waiting: its pending approvals are cancelled (each with an
    event) and its calls that never ran are marked cancelled."""
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


def run_park_for_approval(*, run_id, owner: str) -> bool:
    """Park a running run until its pending approvals are decided. Returns False (and leaves the
    run running) when there is nothing left to wait for: the approvals were decided while the
    step still ran, and the decision could not requeue a run that was not parked yet."""
    with transaction.atomic():
        # The run's row lock orders this against approval_decide, which locks the run first too.
        run = Run.objects.select_for_update().filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner).first()
        if run is None or not Approval.objects.filter(run_id=run_id, status=Approval.Status.PENDING).exists():
            return False
        updated = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner).update(
            status=RunStatus.AWAITING_APPROVAL, lease_owner="", lease_expires_at=None
        )
        if updated:
            run_event_append(run_id=run_id, type="run.awaiting_approval")
        return bool(updated)


def run_cancel(*, run: Run, by=None) -> Run:
    """Queued or parked runs end now; a running one stops at its next step boundary."""
    if run.status == RunStatus.RUNNING:
        Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(cancel_requested=True)
        run_event_append(run_id=run.pk, type="run.cancel_requested", payload={"by": getattr(by, "username", None)})
    elif run.status in (RunStatus.QUEUED, RunStatus.AWAITING_APPROVAL):
        run_finish(run_id=run.pk, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
    run.refresh_from_db()
    return run
