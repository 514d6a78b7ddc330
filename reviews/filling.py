"""Filling a review queue: the runs that matched its filters since the last fill become items.

Each filter reads its own clock: negative feedback by when it was given (a rating comes after the
run), a low online score by when it was scored, a guardrail hit, a tool error and the sample by
when the run ended. A fill reads the events in [filled_until, now) and moves filled_until to now;
a filter with more than FILL_MAX events takes the oldest FILL_MAX and the watermark stops at the
last one taken, so the next fill goes on from there (the runs the queue holds already are left out
of every filter, and there is one item per run and queue). The sample is decided by the run's
id (a random UUID), so a run read again is picked again or not, as the first time.

A fill holds its queue's row (skip_locked): beat's fill and a reviewer's opening the queue never
fill one queue at once, and the second simply finds nothing to do."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from conversations.models import TERMINAL_STATUSES, GuardrailTrigger, Run, RunFeedback, RunStatus, ToolInvocation
from evals.models import OnlineScore
from reviews.models import ReviewItem, ReviewQueue

# At most this many runs per filter and fill; the rest wait for the next fill.
FILL_MAX = 200
# A queue's first fill looks this far back.
FIRST_FILL = timedelta(days=7)
# The sample's scan reads at most this many ended runs a fill (it keeps sample_rate of them).
SAMPLE_SCAN_MAX = 5000
_UUID_SPACE = 2**128


@dataclass(frozen=True)
class Picked:
    """One filter's runs in the window, oldest event first; cut_at: the time of the last event it
    took when it stopped at FILL_MAX (None when it took them all)."""

    reason: str
    run_ids: list
    cut_at: datetime | None


def production_runs(queue: ReviewQueue) -> QuerySet:
    """The queue's agent's (or its workspace's) ended top-level runs that are neither an
    evaluation's, a fork's nor the playground's (all three are sandboxed or forked)."""
    runs = Run.objects.filter(
        status__in=TERMINAL_STATUSES,
        parent_run__isnull=True,
        sandbox__isnull=True,
        forked_from__isnull=True,
        fork_step__isnull=True,
    )
    if queue.agent_id is not None:
        return runs.filter(agent_id=queue.agent_id)
    return runs.filter(agent__workspace_id=queue.workspace_id)


def _pick(reason: str, rows: list[tuple]) -> Picked:
    """rows: (run id, event time), oldest first, at most FILL_MAX + 1 of them."""
    cut = len(rows) > FILL_MAX
    rows = rows[:FILL_MAX]
    return Picked(reason=reason, run_ids=[run_id for run_id, _at in rows], cut_at=rows[-1][1] if cut else None)


def _window(queryset: QuerySet, field: str, since: datetime, until: datetime) -> QuerySet:
    return queryset.filter(**{f"{field}__gte": since, f"{field}__lt": until}).order_by(field, "pk")


def _sampled(run_id, rate: float) -> bool:
    return run_id.int < rate * _UUID_SPACE


def queue_picks(queue: ReviewQueue, *, since: datetime, until: datetime) -> list[Picked]:
    """What each filter switched on picks in [since, until), in the order the reasons are told,
    leaving out the runs the queue holds already (so a fill's budget goes to new ones)."""
    runs = production_runs(queue).exclude(Exists(ReviewItem.objects.filter(queue=queue, run_id=OuterRef("pk"))))
    picks = []
    if queue.on_negative_feedback:
        feedback = _window(RunFeedback.objects.filter(rating=-1, run__in=runs), "updated_at", since, until).values_list(
            "run_id", "updated_at"
        )
        picks.append(_pick(ReviewItem.Reason.NEGATIVE_FEEDBACK, list(feedback[: FILL_MAX + 1])))
    if queue.score_below is not None:
        scores = OnlineScore.objects.filter(score__lt=queue.score_below, run_id__in=runs.values("pk"))
        if queue.score_evaluator_id is not None:
            scores = scores.filter(evaluator_id=queue.score_evaluator_id)
        scores = _window(scores, "created_at", since, until).values_list("run_id", "created_at")
        picks.append(_pick(ReviewItem.Reason.LOW_SCORE, list(scores[: FILL_MAX + 1])))
    if queue.on_guardrail_hit:
        hit = runs.filter(Exists(GuardrailTrigger.objects.filter(run_id=OuterRef("pk"))))
        rows = _window(hit, "finished_at", since, until).values_list("pk", "finished_at")
        picks.append(_pick(ReviewItem.Reason.GUARDRAIL, list(rows[: FILL_MAX + 1])))
    if queue.on_tool_error:
        failed = ToolInvocation.objects.filter(run_id=OuterRef("pk"), status=ToolInvocation.Status.ERROR)
        rows = _window(runs.filter(Exists(failed)), "finished_at", since, until).values_list("pk", "finished_at")
        picks.append(_pick(ReviewItem.Reason.TOOL_ERROR, list(rows[: FILL_MAX + 1])))
    if queue.sample_rate > 0:
        completed = runs.filter(status=RunStatus.COMPLETED)
        scanned = list(
            _window(completed, "finished_at", since, until).values_list("pk", "finished_at")[:SAMPLE_SCAN_MAX]
        )
        kept = [row for row in scanned if _sampled(row[0], queue.sample_rate)]
        picked = _pick(ReviewItem.Reason.SAMPLE, kept)
        if picked.cut_at is None and len(scanned) == SAMPLE_SCAN_MAX:
            picked = Picked(reason=picked.reason, run_ids=picked.run_ids, cut_at=scanned[-1][1])
        picks.append(picked)
    return picks


def review_queue_fill(*, queue_id: int, now: datetime | None = None) -> int:
    """Add the runs the queue's filters picked since its last fill; the number of items added.
    A queue disabled, deleted or being filled by someone else adds none."""
    now = now or timezone.now()
    with transaction.atomic():
        queue = ReviewQueue.objects.select_for_update(skip_locked=True).filter(pk=queue_id, enabled=True).first()
        if queue is None:
            return 0
        since = queue.filled_until or (queue.created_at - FIRST_FILL)
        picks = queue_picks(queue, since=since, until=now)
        seen, items = set(), []
        for picked in picks:
            for run_id in picked.run_ids:
                if run_id not in seen:
                    seen.add(run_id)
                    items.append(ReviewItem(queue=queue, run_id=run_id, reason=picked.reason))
        existing = set(ReviewItem.objects.filter(queue=queue, run_id__in=seen).values_list("run_id", flat=True))
        added = [item for item in items if item.run_id not in existing]
        ReviewItem.objects.bulk_create(added, ignore_conflicts=True)
        cuts = [picked.cut_at for picked in picks if picked.cut_at is not None]
        queue.filled_until = min(cuts) if cuts else now
        queue.save(update_fields=["filled_until"])
    return len(added)


def review_queues_fill() -> dict:
    """Every enabled queue filled once (beat's task): {queue id: items added}."""
    return {
        queue_id: review_queue_fill(queue_id=queue_id)
        for queue_id in ReviewQueue.objects.filter(enabled=True).values_list("pk", flat=True)
    }
