"""Celery tasks of the chat bots: thin wrappers that take ids and call chatbots.replies. A post
the service may take later (a network error, a 5xx, a 429) is retried with backoff a few times;
a refusal is not."""

from celery import shared_task
from django.conf import settings

from chatbots.files import chat_files_receive
from chatbots.inbound import CHAT_FILES_TASK
from chatbots.replies import (
    CHAT_NOTICE_TASK,
    CHAT_REPLY_TASK,
    CHAT_STREAM_TASK,
    PostFailed,
    chat_notice,
    chat_reply,
    chat_stream,
)
from platform_site.backoff import backoff_delay

MAX_ATTEMPTS = 4


def _delay(retries: int) -> float:
    return backoff_delay(
        retries + 1,
        base=settings.AGENTRY_WEBHOOK_RETRY_BASE_SECONDS,
        cap=settings.AGENTRY_WEBHOOK_RETRY_MAX_SECONDS,
    )


@shared_task(name=CHAT_REPLY_TASK, bind=True, acks_late=True, ignore_result=True, max_retries=MAX_ATTEMPTS - 1)
def chat_reply_task(self, run_id: str, kind: str, approval_id=None) -> None:
    try:
        chat_reply(run_id=run_id, kind=kind, approval_id=approval_id)
    except PostFailed as exc:
        if exc.retryable and self.request.retries < MAX_ATTEMPTS - 1:
            raise self.retry(countdown=_delay(self.request.retries)) from None


@shared_task(name=CHAT_NOTICE_TASK, bind=True, acks_late=True, ignore_result=True, max_retries=MAX_ATTEMPTS - 1)
def chat_notice_task(self, event_id: int) -> None:
    try:
        chat_notice(event_id=event_id)
    except PostFailed as exc:
        if exc.retryable and self.request.retries < MAX_ATTEMPTS - 1:
            raise self.retry(countdown=_delay(self.request.retries)) from None


@shared_task(name=CHAT_STREAM_TASK, acks_late=True, ignore_result=True)
def chat_stream_task(run_id: str) -> None:
    # Not retried: the next edit, or the final answer, shows the text this one would have.
    try:
        chat_stream(run_id=run_id)
    except PostFailed:
        pass


@shared_task(name=CHAT_FILES_TASK, acks_late=True, ignore_result=True)
def chat_files_task(event_id: int, text: str, files: list) -> None:
    chat_files_receive(event_id=event_id, text=text, files=files)
