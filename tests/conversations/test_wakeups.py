"""Wake-ups for live event streams, published from plain code and from an engine loop."""

import time
import uuid

import pytest
import redis
from django.conf import settings

from conversations.wakeups import CHANNEL_PREFIX, publish_run_event
from tests.carried import carry

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="wake-ups need Redis")


@pytest.fixture
def runs():
    """Two run ids of this test alone (channels are server-wide: other tests publish too), and
    a subscription to both."""
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    client = redis.Redis.from_url(settings.REDIS_URL)
    pubsub = client.pubsub()
    pubsub.subscribe(f"{CHANNEL_PREFIX}{a}", f"{CHANNEL_PREFIX}{b}")
    for _ in range(2):
        assert pubsub.get_message(timeout=2)["type"] == "subscribe"
    yield a, b, pubsub
    pubsub.close()
    client.close()


def _received(pubsub, seconds: float = 2.0) -> list[str]:
    channels, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.2)
        if message and message["type"] == "message":
            channels.append(message["channel"].decode().removeprefix(CHANNEL_PREFIX))
    return channels


def test_plain_code_publishes_each_wake_up_at_once(runs):
    a, _, pubsub = runs
    publish_run_event(a)
    publish_run_event(a)

    assert _received(pubsub) == [a, a]


def test_an_engine_loop_sends_the_wake_ups_of_one_turn_once_per_run_without_waiting(runs):
    a, b, pubsub = runs

    def steps():
        publish_run_event(a)
        publish_run_event(b)
        publish_run_event(a)  # same turn of the loop: "look" once is enough

    carry(steps)

    assert sorted(_received(pubsub)) == sorted([a, b])


def test_an_unreachable_redis_costs_a_carried_run_nothing_but_a_warning(settings, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"

    def steps():
        publish_run_event("run-a")
        return "went on"

    assert carry(steps) == "went on"
    assert "wake-ups not published" in caplog.text
