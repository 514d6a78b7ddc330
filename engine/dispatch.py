"""Handing runs to workers, and admitting a conversation's waiting runs one at a time."""

import hashlib
import logging
from functools import partial

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from conversations import events
from conversations.batch import Batch, messages_add, run_event_append
from conversations.events import EventType
from conversations.models import Conversation, Message, Run, RunRequest, RunStatus
from conversations.services import messages_append
from platform_site.celery import app

log = logging.getLogger(__name__)

ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_CHILDREN)
# engine.tasks registers it under its former name too (agents.tasks.run_advance_task).
RUN_ADVANCE_TASK = "engine.tasks.run_advance_task"


def run_started_record(*, run: Run, user_id, content: str, version_number: int, reason: str) -> None:
    """What a run started outside admission (a delegated run, a fork) records with itself: what
    it was asked, by whom (its RunRequest), and its first event, run.queued, saying why."""
    RunRequest.objects.create(
        run=run,
        conversation_id=run.conversation_id,
        user_id=user_id,
        content=content,
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
    )
    run_event_append(
        run_id=run.pk,
        type=EventType.RUN_QUEUED,
        payload=events.run_queued(agent_version=version_number, reason=reason),
    )


def run_enqueue(*, run_id, stamped: bool = False) -> None:
    """Hand the run to a worker once the caller's transaction commits (with its id only).

    A message can still be lost after that (a broker restart, a worker killed holding it
    prefetched); `enqueued_at` lets the sweeper hand a run that stayed queued again. `stamped`:
    the caller wrote `enqueued_at` with the run's row already.
    """
    if not stamped:
        Run.objects.filter(pk=run_id).update(enqueued_at=timezone.now())
    transaction.on_commit(partial(_send_run, run_id))


def _send_run(run_id) -> None:
    # The run is committed, so the request has succeeded whatever the broker says: an
    # unreachable broker (any transport's error) is logged, and the sweeper sends the run
    # again from `enqueued_at` once the broker is back.
    try:
        # By its registered name: engine.tasks sits above the loop that enqueues, so this module
        # cannot import it (EngineConfig.ready registers the tasks in every process).
        app.tasks[RUN_ADVANCE_TASK].delay(str(run_id))
    except Exception:
        log.exception("run %s committed but not sent to the broker; the sweeper will send it again", run_id)


def run_admit(
    run: Run, content: str, *, parts: list[dict] | None = None, stamped: bool = False, batch: Batch | None = None
) -> None:
    """Give the run its user message (its text, and its attachments' `parts`) and hand it to a
    worker once this transaction commits (`stamped` as for run_enqueue). With `batch`, the
    message is one of its writes: the caller executes it in this transaction (the hand-over waits
    for the commit either way)."""
    message = [{"role": Message.Role.USER, "content": content, **({"parts": parts} if parts else {})}]
    if batch is None:
        messages_append(conversation_id=run.conversation_id, run_id=run.pk, messages=message)
    else:
        messages_add(batch, conversation_id=run.conversation_id, run_id=run.pk, messages=message)
    run_enqueue(run_id=run.pk, stamped=stamped)


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
            run_admit(run, run.request.content, parts=run.request.parts)
        return run
