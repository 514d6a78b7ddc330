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


def queues_agreement(*, queue_ids) -> dict[int, Agreement]:
    """Each queue's agreement: the first two verdicts of each of its runs labelled at least twice."""
    twice = ReviewItem.objects.filter(queue_id__in=queue_ids).annotate(reviews=Count("labels")).filter(reviews__gte=2)
    verdicts: dict[int, dict[int, list[str]]] = {queue_id: {} for queue_id in queue_ids}
    for queue_id, item_id, verdict in (
        ReviewLabel.objects.filter(item__in=twice.values("pk"))
        .order_by("item_id", "created_at", "pk")
        .values_list("item__queue_id", "item_id", "verdict")
    ):
        verdicts[queue_id].setdefault(item_id, []).append(verdict)
    return {queue_id: verdict_agreement([(v[0], v[1]) for v in items.values()]) for queue_id, items in verdicts.items()}


def queue_agreement(*, queue: ReviewQueue) -> Agreement:
    return queues_agreement(queue_ids=[queue.pk])[queue.pk]
