"""Queue depth read from the real broker (Redis in the test suite), cached, and 'unknown' when
the broker cannot be asked."""

import time

import pytest
from django.core.cache import cache
from kombu import Queue

from console.monitoring import broker
from platform_site.celery import app
from tests.support.waits import wait_for

PROBE_QUEUE = "monitoring-probe-test"


@pytest.fixture
def probe_queue(monkeypatch, settings):
    settings.AGENTRY_MONITOR_PROBE_CACHE_SECONDS = 60
    monkeypatch.setitem(app.conf, "task_queues", (*app.conf.task_queues, Queue(PROBE_QUEUE)))
    cache.delete_many([broker.QUEUES_KEY, broker.WORKERS_KEY])
    yield PROBE_QUEUE
    with app.connection_for_write() as connection:
        connection.default_channel.queue_purge(PROBE_QUEUE)
    cache.delete_many([broker.QUEUES_KEY, broker.WORKERS_KEY])


def _answered_depths() -> dict | None:
    # A first read waits only a little for the broker and says "pending" after that; a loaded
    # machine can take longer (a cached answer is never pending).
    answer = broker.queue_depths()
    return None if answer.get("pending") else answer


def _depths() -> dict:
    answer = wait_for(_answered_depths, timeout=10, message="the broker's queue depths")
    return {queue["name"]: queue["depth"] for queue in answer["queues"]}


def test_queue_depth_counts_waiting_messages_per_queue(probe_queue):
    assert _depths()[probe_queue] == 0
    cache.delete(broker.QUEUES_KEY)
    for _ in range(3):
        app.send_task("agentry.nothing", args=[], queue=probe_queue)

    depths = _depths()
    assert depths[probe_queue] == 3
    assert set(depths) >= {"llm", "maintenance", probe_queue}

    # Cached: a dashboard refreshing in many tabs asks the broker once per interval.
    app.send_task("agentry.nothing", args=[], queue=probe_queue)
    assert _depths()[probe_queue] == 3
    cache.delete(broker.QUEUES_KEY)
    assert _depths()[probe_queue] == 4


def test_unreachable_broker_reads_unknown_not_an_error(probe_queue, monkeypatch):
    monkeypatch.setitem(app.conf, "broker_read_url", "redis://127.0.0.1:1/0")
    result = broker.queue_depths()
    assert result["error"] and all(queue["depth"] is None for queue in result["queues"])


def test_a_stale_answer_is_served_while_a_fresh_one_is_fetched(probe_queue, settings):
    settings.AGENTRY_MONITOR_PROBE_CACHE_SECONDS = 0.2
    assert _depths()[probe_queue] == 0
    app.send_task("agentry.nothing", args=[], queue=probe_queue)
    time.sleep(0.3)

    assert _depths()[probe_queue] == 0  # stale, answered at once; a thread asks the broker
    wait_for(lambda: _depths()[probe_queue] == 1, timeout=5, message="the background probe")
