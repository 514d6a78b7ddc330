"""Celery tasks: thin wrappers that call services."""

from celery import shared_task

from reviews.filling import review_queues_fill


@shared_task(name="reviews.tasks.review_queues_fill_task", ignore_result=True)
def review_queues_fill_task() -> dict:
    """On beat (settings: fill-review-queues): every enabled review queue takes its new runs."""
    return review_queues_fill()
