"""Celery tasks of the monitoring rollups (scheduled by beat, routed to the maintenance queue)."""

from celery import shared_task

from conversations.monitoring.rollups import rollups_refresh


@shared_task(name="conversations.monitoring.tasks.rollups_refresh_task", ignore_result=True)
def rollups_refresh_task() -> dict:
    return rollups_refresh()
