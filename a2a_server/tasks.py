"""Celery tasks of the A2A server: thin wrappers that take ids and call services."""

from celery import shared_task

from a2a_server.push import PUSH_SEND_TASK, push_send


@shared_task(name=PUSH_SEND_TASK, bind=True, acks_late=True, ignore_result=True, max_retries=None)
def a2a_push_send_task(self, config_id: str, event_id: int) -> None:
    # The attempts are bounded by the service (AGENTRY_WEBHOOK_MAX_ATTEMPTS).
    delay = push_send(config_id=config_id, event_id=event_id, attempt=self.request.retries + 1)
    if delay is not None:
        raise self.retry(countdown=delay)
