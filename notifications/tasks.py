"""Celery tasks of notifications: thin wrappers that take ids and call services."""

from engine.tasks import renamed_task
from notifications.deliveries import WEBHOOK_DELIVER_TASK
from notifications.sending import webhook_attempt


# Named conversations.tasks.webhook_deliver_task before webhooks were their own app: a delivery
# queued then (or retried under that name) is still sent.
@renamed_task(
    name=WEBHOOK_DELIVER_TASK,
    formerly="conversations.tasks.webhook_deliver_task",
    bind=True,
    acks_late=True,
    ignore_result=True,
    max_retries=None,
)
def webhook_deliver_task(self, delivery_id: str) -> None:
    # The number of attempts is bounded by the service (AGENTRY_WEBHOOK_MAX_ATTEMPTS), which
    # counts them on the delivery row, so redelivered tasks cannot add attempts.
    delay = webhook_attempt(delivery_id=delivery_id)
    if delay is not None:
        raise self.retry(countdown=delay)
