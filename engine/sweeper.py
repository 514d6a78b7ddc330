"""Recovery of runs whose worker vanished, so that no run stays non-terminal forever, and of
model calls whose worker vanished, so that no call stays started forever."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from conversations import events
from conversations.models import LLMCall, Message, Run, RunStatus, StopReason
from engine.dispatch import conversation_admit_next, run_enqueue
from engine.limits import timeout_limit
from engine.memory import memory_extractions_interrupted
from engine.model_call import INTERRUPTED
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


# Made only by a run's loop, under its lease. The others (an extraction, a judge, an embedding,
# which a completed run's extraction makes too) may be made after the run ended.
_IN_RUN = (LLMCall.Purpose.STEP, LLMCall.Purpose.SUMMARY, LLMCall.Purpose.MODERATION)


def calls_sweep(now) -> int:
    """Close as interrupted the model calls still started whose worker is gone; the count.

    A call of a run's loop (a step, a summary, a moderation verdict) is made under the run's
    lease: its worker is gone once the run is no longer running on a live lease (the sweeper
    requeued or ended it; the next attempt would close it too, but a run that ended never makes
    one). A call that may be made outside the lease (a memory extraction, an eval judge, an
    embedding) has its timeouts capped to AGENTRY_MODEL_CALL_MAX_SECONDS or below: still
    started after twice that, its worker is gone. An interrupted extraction is sent again,
    a bounded number of times (engine.memory.memory_extractions_interrupted)."""
    grace = now - timedelta(seconds=settings.AGENTRY_RUN_LEASE_SECONDS)
    held = Q(run__status=RunStatus.RUNNING, run__lease_expires_at__gte=now)
    in_run = Q(run__isnull=False, purpose__in=_IN_RUN, started_at__lt=grace) & ~held
    overdue = now - timedelta(seconds=2 * settings.AGENTRY_MODEL_CALL_MAX_SECONDS)
    out_of_run = (~Q(purpose__in=_IN_RUN) | Q(run__isnull=True)) & Q(started_at__lt=overdue)
    abandoned = LLMCall.objects.filter(status=LLMCall.Status.STARTED).filter(in_run | out_of_run)
    # Read through the partial index on started calls (llm_call_open_idx): they are few.
    closed = list(abandoned.order_by().values_list("pk", "run_id", "purpose"))
    if not closed:
        return 0
    # Guarded by the status, so a call completed meanwhile keeps its answer.
    LLMCall.objects.filter(pk__in=[pk for pk, _run, _purpose in closed], status=LLMCall.Status.STARTED).update(
        status=LLMCall.Status.FAILED, error=INTERRUPTED, finished_at=now
    )
    memory_extractions_interrupted(
        run_ids=[run_id for _pk, run_id, purpose in closed if purpose == LLMCall.Purpose.MEMORY]
    )
    return len(closed)


def runs_sweep() -> dict:
    """End runs past their deadline, requeue runs whose lease lapsed (they resume from the
    database), fail those that have been recovered too often, re-enqueue queued runs whose
    task went missing, and close the model calls whose worker is gone (calls_sweep)."""
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
    # After the runs: those requeued or ended above no longer hold their calls.
    interrupted = calls_sweep(now)
    summary = {
        "requeued": requeued,
        "failed": failed,
        "reenqueued": reenqueued,
        "timed_out": timed_out,
        "admitted": admitted_waiting,
        "calls_interrupted": interrupted,
    }
    if requeued or failed or timed_out or interrupted:
        log.info("sweep: %s", summary)
    return summary
