"""Celery tasks of conversations: thin wrappers that take ids and call services."""

from celery import shared_task

from conversations.webhooks import WEBHOOK_DELIVER_TASK, webhook_attempt


@shared_task(name=WEBHOOK_DELIVER_TASK, bind=True, acks_late=True, ignore_result=True, max_retries=None)
def webhook_deliver_task(self, delivery_id: str) -> None:
    # The number of attempts is bounded by the service (AGENTRY_WEBHOOK_MAX_ATTEMPTS), which
    # counts them on the delivery row, so redelivered tasks cannot add attempts.
    delay = webhook_attempt(delivery_id=delivery_id)
    if delay is not None:
        raise self.retry(countdown=delay)
