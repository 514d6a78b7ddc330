"""With a real worker: the rollup task is routed and run by beat's schedule name, the workers
answer the dashboard's ping, and the worker's log lines name the run they are about."""

import pytest
from django.core.cache import cache

from console.monitoring import broker
from conversations.models import Run
from conversations.monitoring.models import RollupState
from conversations.monitoring.tasks import rollups_refresh_task
from conversations.services import conversation_create
from engine.admission import message_post
from platform_site.celery import app
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for
from tests.support.workers import ARTIFACTS

pytestmark = pytest.mark.e2e


def test_beat_schedules_the_rollup_task_on_the_maintenance_queue(worker):
    entry = app.conf.beat_schedule["monitoring-rollups"]
    assert entry["task"] == rollups_refresh_task.name
    assert app.amqp.router.route({}, rollups_refresh_task.name)["queue"].name == "maintenance"

    rollups_refresh_task.delay()
    wait_for(lambda: RollupState.objects.filter(name="ledger").exists(), timeout=20, message="a rollup refresh")


def _workers_online() -> list[str]:
    online = broker.workers_online()["online"]
    if not online:
        # A ping the worker answered after its timeout is stored as "none online", and served as
        # fresh for the cache's interval: ask again.
        cache.delete(broker.WORKERS_KEY)
    return online


def test_workers_answer_the_ping_and_log_the_run_they_work_on(worker, fake_llm):
    cache.delete(broker.WORKERS_KEY)
    online = wait_for(_workers_online, timeout=30, message="a reply to the ping")
    assert any(name.startswith(f"{worker.name}-{worker.starts}@") for name in online), online

    model = ModelConfigFactory(
        base_url=fake_llm.api_base,
        model=fake_llm.script("e2e-log", {"scenarios": [{"match": ".", "steps": [{"content": "logged"}]}]}),
    )
    run = message_post(conversation=conversation_create(agent=make_agent(model_config=model)), content="hi")
    wait_for(lambda: Run.objects.filter(pk=run.pk, status="completed").exists(), message="the run to complete")

    log = (ARTIFACTS / f"{worker.name}-{worker.starts}.log").read_text()
    lines = [line for line in log.splitlines() if f"run_id={run.pk}" in line]
    assert any("claimed by" in line for line in lines)
    assert any("model call 1.1" in line and "llm_call_id=" in line for line in lines)
