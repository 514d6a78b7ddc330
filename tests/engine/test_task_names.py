"""Runs in flight survive an upgrade only if the task names on the broker still resolve."""

from django.conf import settings

from conversations import tasks as conversation_tasks
from engine import tasks as engine_tasks
from platform_site.celery import app


def test_task_names_are_the_ones_messages_already_queued_carry():
    assert engine_tasks.run_advance_task.name == "agents.tasks.run_advance_task"
    assert engine_tasks.runs_sweep_task.name == "agents.tasks.runs_sweep_task"
    assert engine_tasks.approvals_expire_task.name == "conversations.tasks.approvals_expire_task"
    assert conversation_tasks.webhook_deliver_task.name == "conversations.tasks.webhook_deliver_task"


def test_every_routed_and_scheduled_task_is_registered_in_a_worker():
    app.loader.import_default_modules()  # what a starting worker does: autodiscovery included
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    missing = (scheduled | set(settings.CELERY_TASK_ROUTES)) - set(app.tasks)
    assert not missing
    assert settings.CELERY_TASK_ROUTES[engine_tasks.runs_sweep_task.name]["queue"] == "maintenance"


def test_only_the_run_hand_over_is_left_to_the_sweeper_on_redis():
    # Its deliveries skip Redis's acknowledgement bookkeeping (platform_site.redis_broker) because
    # the sweeper hands a run whose message was lost to the queue again; no other task has that.
    assert settings.AGENTRY_BROKER_SWEPT_TASKS == (engine_tasks.run_advance_task.name,)
    assert set(settings.AGENTRY_BROKER_SWEPT_TASKS) <= set(app.tasks)
