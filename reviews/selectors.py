"""Reads of review queues: what the queue list shows of each queue, and the verdict pairs its
agreement is measured on."""

from django.db.models import Count, Q, QuerySet

from reviews.agreement import Agreement, verdict_agreement
from reviews.models import ReviewItem, ReviewLabel, ReviewQueue
from workspaces.access import in_workspace


def queues_visible_to(*, user) -> QuerySet[ReviewQueue]:
    return in_workspace(ReviewQueue.objects.all(), user)


def items_visible_to(*, user) -> QuerySet[ReviewItem]:
    return in_workspace(ReviewItem.objects.all(), user)


def queues_with_counts(queues: QuerySet[ReviewQueue]) -> QuerySet[ReviewQueue]:
    states = ReviewItem.State
    return queues.annotate(
        open_count=Count("items", filter=Q(items__state=states.OPEN)),
        assigned_count=Count("items", filter=Q(items__state=states.ASSIGNED)),
        done_count=Count("items", filter=Q(items__state=states.DONE)),
    )


def queue_agreement(*, queue: ReviewQueue) -> Agreement:
    """The first two verdicts of each of the queue's runs labelled at least twice."""
    verdicts: dict[int, list[str]] = {}
    for item_id, verdict in (
        ReviewLabel.objects.filter(item__queue=queue)
        .order_by("item_id", "created_at", "pk")
        .values_list("item_id", "verdict")
    ):
        verdicts.setdefault(item_id, []).append(verdict)
    return verdict_agreement([(v[0], v[1]) for v in verdicts.values() if len(v) >= 2])
