"""Every task is named for its module, and runs in flight survive an upgrade that renamed one:
the names messages already on the broker carry still resolve, to the same function and queue."""

import pytest
from django.conf import settings

from conversations.models import Run
from engine import tasks as engine_tasks
from platform_site.celery import app
from tests.support.runs import last_answer, start_run
from tests.support.waits import wait_for

# The names tasks had before the engine and notifications were apps of their own, and the queue
# their messages went to.
FORMER = {
    "agents.tasks.run_advance_task": ("engine.tasks.run_advance_task", "llm"),
    "agents.tasks.runs_sweep_task": ("engine.tasks.runs_sweep_task", "maintenance"),
    "conversations.tasks.approvals_expire_task": ("engine.tasks.approvals_expire_task", "maintenance"),
    "conversations.tasks.webhook_deliver_task": ("notifications.tasks.webhook_deliver_task", "maintenance"),
}


def _registered() -> dict:
    app.loader.import_default_modules()  # what a starting worker does: autodiscovery included
    return dict(app.tasks)


def test_every_task_is_named_for_its_module():
    ours = {name: task for name, task in _registered().items() if not name.startswith("celery.")}
    assert len(ours) > len(FORMER)
    for name, task in ours.items():
        if name not in engine_tasks.FORMER_NAMES:
            assert name == f"{task.__module__}.{type(task).__name__}"
    assert engine_tasks.runs_sweep_task.name == "engine.tasks.runs_sweep_task"


def test_a_former_name_runs_the_same_function_on_the_same_queue():
    registered = _registered()
    assert engine_tasks.FORMER_NAMES == {former: name for former, (name, _) in FORMER.items()}
    for former, (name, queue) in FORMER.items():
        alias, task = registered[former], registered[name]
        # A bound task's run is a method of its own task object: the function under it is the same.
        assert getattr(alias.run, "__func__", alias.run) is getattr(task.run, "__func__", task.run)
        assert (alias.acks_late, alias.ignore_result) == (task.acks_late, task.ignore_result)
        assert settings.CELERY_TASK_ROUTES[name]["queue"] == queue
        # What app.send_task (or a retry, or beat) does with the name: the task's options, then the routes.
        assert app.amqp.router.route(alias._get_exec_options(), former)["queue"].name == queue
        assert app.amqp.router.route(task._get_exec_options(), name)["queue"].name == queue


def test_every_routed_and_scheduled_task_is_registered_in_a_worker():
    registered = _registered()
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    missing = (scheduled | set(settings.CELERY_TASK_ROUTES)) - set(registered)
    assert not missing
    assert not (scheduled | set(settings.CELERY_TASK_ROUTES)) & set(FORMER)
    assert settings.CELERY_TASK_ROUTES[engine_tasks.runs_sweep_task.name]["queue"] == "maintenance"


@pytest.mark.e2e
def test_a_run_queued_under_the_former_name_is_carried_by_a_worker(worker, scripted_agent):
    agent = scripted_agent({"scenarios": [], "fallback": {"content": "carried under the old name"}})
    run = start_run(agent)
    # As a message queued by the previous release: its name, its queue.
    app.send_task("agents.tasks.run_advance_task", args=[str(run.pk)], queue="llm")

    run = wait_for(lambda: Run.objects.filter(pk=run.pk, status="completed").first(), timeout=30, message="the run")
    assert last_answer(run) == "carried under the old name"
