"""Recovery of runs whose worker vanished, so that no run stays non-terminal forever."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from conversations import events
from conversations.models import Message, Run, RunStatus, StopReason
from engine.dispatch import conversation_admit_next, run_enqueue
from engine.limits import timeout_limit
from engine.runs import run_finish
from engine.transitions import run_transition

log = logging.getLogger(__name__)


def _past_deadline(now) -> int:
    """End runs past their deadline that no live worker holds: queued, parked for approval or
    for delegated runs (whose end cancels them), or running on a lapsed lease. A live worker
    stops its own run at the next step boundary."""
    open_runs = (
        Run.objects.filter(deadline__lt=now)
        .filter(
            Q(status__in=[RunStatus.QUEUED, RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_CHILDREN])
            | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
        )
        .select_related("agent_version")
        .only("pk", "agent_version__snapshot")
    )
    ended = 0
    for run in open_runs:
        limit = timeout_limit(run.agent_version.snapshot)
        ended += run_finish(
            run_id=run.pk, status=RunStatus.COMPLETED, stop_reason=limit.stop_reason, final_message=limit.message
        )
    return ended


def runs_sweep() -> dict:
    """End runs past their deadline, requeue runs whose lease lapsed (they resume from the
    database), fail those that have been recovered too often, and re-enqueue queued runs
    whose task went missing."""
    now = timezone.now()
    timed_out = _past_deadline(now)
    requeued = failed = reenqueued = 0
    lapsed = Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now).values_list("pk", "recoveries")
    for run_id, recoveries in lapsed:
        if recoveries >= settings.AGENTRY_RUN_MAX_RECOVERIES:
            failed += run_finish(
                run_id=run_id,
                status=RunStatus.FAILED,
                stop_reason=StopReason.WORKER_LOST,
                error=f"The worker running this run stopped responding {recoveries + 1} times; giving up.",
            )
            continue
        with transaction.atomic():
            if run_transition(
                run_id=run_id,
                to=RunStatus.QUEUED,
                expect=[RunStatus.RUNNING],
                where=Q(lease_expires_at__lt=now),
                fields={"recoveries": F("recoveries") + 1},
                payload=events.run_requeued(reason="lease lapsed"),
            ):
                run_enqueue(run_id=run_id)
                requeued += 1
    stale = now - timedelta(seconds=settings.AGENTRY_QUEUED_REENQUEUE_SECONDS)
    stale_queued = Run.objects.filter(status=RunStatus.QUEUED, created_at__lt=stale)
    admitted = Exists(Message.objects.filter(run_id=OuterRef("pk")))
    # Handed to the queue long ago and still not taken: the message was lost; hand it again.
    not_taken = Q(enqueued_at__lt=stale) | Q(enqueued_at__isnull=True)
    for run_id in stale_queued.filter(admitted).filter(not_taken).values_list("pk", flat=True):
        with transaction.atomic():
            run_enqueue(run_id=run_id)
        reenqueued += 1
    # A run waiting its turn is admitted when the run before it ends; if that hand-over was
    # lost (a crash right after the commit), admit it here.
    admitted_waiting = 0
    for conversation_id in set(stale_queued.exclude(admitted).values_list("conversation_id", flat=True)):
        admitted_waiting += conversation_admit_next(conversation_id=conversation_id) is not None
    summary = {
        "requeued": requeued,
        "failed": failed,
        "reenqueued": reenqueued,
        "timed_out": timed_out,
        "admitted": admitted_waiting,
    }
    if requeued or failed or timed_out:
        log.info("sweep: %s", summary)
    return summary
