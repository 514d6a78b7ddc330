"""Celery tasks of conversations: thin wrappers around services."""

from celery import shared_task

from conversations.approvals.services import approvals_expire


@shared_task(ignore_result=True)
def approvals_expire_task() -> int:
    return approvals_expire()
