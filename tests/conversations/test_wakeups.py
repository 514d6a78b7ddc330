"""Wake-ups for live event streams, published from plain code and from an engine loop."""

import asyncio
import time
import uuid

import pytest
import redis
from django.conf import settings

from conversations.wakeups import CHANNEL_PREFIX, LOOK, SETTLED, RedisWaker, publish_run_event
from tests.support.carried import carry

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


def _messages(pubsub, seconds: float = 2.0, quiet: float = 0.5) -> list[tuple[str, bytes]]:
    """What arrived until `quiet` seconds passed without a message (at most `seconds`): the tests
    publish before they read, so a repeated wake-up would already be on its way."""
    received, deadline = [], time.monotonic() + seconds
    last = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last < quiet:
        message = pubsub.get_message(timeout=0.1)
        if message and message["type"] == "message":
            received.append((message["channel"].decode().removeprefix(CHANNEL_PREFIX), message["data"]))
            last = time.monotonic()
    return received


def _received(pubsub, seconds: float = 2.0) -> list[str]:
    return [channel for channel, _ in _messages(pubsub, seconds)]


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


def test_a_wake_up_says_whether_the_run_may_have_settled(runs):
    a, _, pubsub = runs
    publish_run_event(a)
    publish_run_event(a, settles=True)

    assert _messages(pubsub) == [(a, LOOK), (a, SETTLED)]


def test_an_engine_loop_s_one_wake_up_per_turn_is_the_settling_kind_if_any_was(runs):
    a, b, pubsub = runs

    def steps():
        publish_run_event(a)
        publish_run_event(a, settles=True)
        publish_run_event(a)
        publish_run_event(b)

    carry(steps)

    assert sorted(_messages(pubsub)) == sorted([(a, SETTLED), (b, LOOK)])


def test_a_watch_for_the_outcome_wakes_only_when_the_run_may_have_settled():
    run = str(uuid.uuid4())

    async def scenario():
        waker = RedisWaker(settings.REDIS_URL)
        async with waker.watch(run, settles_only=True) as outcome, waker.watch(run) as stream:
            outcome.poll_seconds = stream.poll_seconds = 1.0
            publish_run_event(run)
            looked = (await stream.wait(), await outcome.wait())
            stream.clear()
            publish_run_event(run, settles=True)
            settled = (await stream.wait(), await outcome.wait())
        return looked, settled

    # An ordinary event wakes the stream, not the request waiting for the outcome (its wait
    # times out); the settling one wakes both.
    assert asyncio.run(scenario()) == ((True, False), (True, True))
