"""Celery task of the alert rules (scheduled by beat, routed to the maintenance queue)."""

from celery import shared_task

from alerts.services import alert_rules_evaluate


@shared_task(name="alerts.tasks.alert_rules_evaluate_task", ignore_result=True)
def alert_rules_evaluate_task() -> dict:
    return alert_rules_evaluate()
