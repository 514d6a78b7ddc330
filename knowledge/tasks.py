"""Celery tasks of the knowledge app: thin wrappers that take ids and call services."""

from celery import shared_task

from knowledge.services import BASE_INDEX_TASK, base_index


@shared_task(name=BASE_INDEX_TASK, acks_late=True, ignore_result=True)
def base_index_task(base_id: int, document_ids: list[int]) -> None:
    # Not retried: a document that cannot be read or embedded is marked failed with its error,
    # and the operator re-indexes it from the admin once the cause is fixed.
    base_index(base_id=base_id, document_ids=document_ids)
