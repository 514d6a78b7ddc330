"""kombu's Redis transport with one client per channel (platform_site.redis_broker): the broker
settings choose it for redis://, and kombu's delivery and acknowledgement bookkeeping works on a
real Redis as before."""

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from kombu import Connection, Exchange, Queue

from platform_site.celery import app
from platform_site.redis_broker import Channel, Transport

ROOT = Path(__file__).resolve().parent.parent.parent
REDIS_URL = os.environ["REDIS_URL"]
redis_only = pytest.mark.skipif(not REDIS_URL.startswith("redis://"), reason="needs the suite's Redis")


@redis_only
def test_the_broker_settings_choose_it_for_redis():
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    with app.connection_for_write() as connection:
        assert isinstance(connection.transport, Transport)
        assert isinstance(connection.default_channel, Channel)


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("redis://127.0.0.1:6379/3", "platform_site.redis_broker:Transport"),
        ("REDIS://127.0.0.1:6379/3", "platform_site.redis_broker:Transport"),
        # kombu turns TLS on from the name rediss, which a class path does not carry.
        ("rediss://secure.example:6380/0", "None"),
        ("amqp://guest:guest@127.0.0.1//", "None"),
    ],
)
def test_only_a_plain_redis_url_gets_it(url, transport):
    environment = {**os.environ, "CELERY_BROKER_URL": url, "DJANGO_SETTINGS_MODULE": "platform_site.settings"}
    shown = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.CELERY_BROKER_TRANSPORT)"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert shown.stdout.strip() == transport


@redis_only
def test_a_channel_shares_one_client_and_follows_a_new_pool():
    with Connection(REDIS_URL, transport=Transport) as connection:
        channel = connection.channel()
        first, second = channel._create_client(), channel._create_client()
        assert first is second and first.connection_pool is channel.pool
        assert channel._create_client(asynchronous=True) is not first  # kombu's own, for BRPOP
        assert first.ping()
        channel._pool = None  # as after a close: the next use builds a new pool
        assert channel._create_client() is not first
        channel.close()


@redis_only
def test_delivery_and_acknowledgement_bookkeeping_work_as_kombus():
    name = f"redis-broker-test-{uuid.uuid4().hex}"
    queue = Queue(name, Exchange(name), routing_key=name)
    with Connection(REDIS_URL, transport=Transport) as connection:
        channel = connection.channel()
        producer = connection.Producer(channel)
        for n in range(3):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key=name, declare=[queue])
        received = []
        consumer = connection.Consumer(
            queue, channel=channel, callbacks=[lambda body, message: received.append(message)]
        )
        consumer.qos(prefetch_count=3)
        with consumer:
            while len(received) < 3:
                connection.drain_events(timeout=5)
        qos = channel.qos
        client = channel._create_client()
        # Delivered and not yet acknowledged: recorded in kombu's unacked index and hash.
        assert client.zcard(qos.unacked_index_key) >= 3
        tags = {message.delivery_tag for message in received}
        assert tags <= {tag.decode() for tag in client.hkeys(qos.unacked_key)}
        assert sorted(message.payload["n"] for message in received) == [0, 1, 2]
        for message in received:
            message.ack()
        assert not tags & {tag.decode() for tag in client.hkeys(qos.unacked_key)}
        assert client.llen(name) == 0
        queue(channel).delete()
        channel.close()


def _publish(producer, queue: Queue, n: int, task: str) -> None:
    # A task message as Celery sends it: the task's name in the headers.
    producer.publish({"n": n}, exchange=queue.exchange, routing_key=queue.name, declare=[queue], headers={"task": task})


def _consume(connection, channel, queue: Queue, count: int, prefetch: int) -> list:
    received = []
    consumer = connection.Consumer(queue, channel=channel, callbacks=[lambda body, message: received.append(message)])
    consumer.qos(prefetch_count=prefetch)
    consumer.consume()
    while len(received) < count:
        connection.drain_events(timeout=5)
    return received


def _unacked_tags(channel) -> set[str]:
    client = channel._create_client()
    return {tag.decode() for tag in client.hkeys(channel.qos.unacked_key)}


@pytest.fixture
def swept_queue():
    name = f"redis-broker-swept-{uuid.uuid4().hex}"
    queue = Queue(name, Exchange(name), routing_key=name)
    with Connection(REDIS_URL, transport=Transport) as connection:
        yield connection, queue
        with Connection(REDIS_URL, transport=Transport) as cleanup:
            queue(cleanup.default_channel).delete()


@redis_only
def test_a_swept_tasks_deliveries_are_held_in_memory_and_still_bound_by_the_prefetch(swept_queue):
    connection, queue = swept_queue
    swept, other = settings.AGENTRY_BROKER_SWEPT_TASKS[0], "conversations.tasks.webhook_deliver_task"
    channel = connection.channel()
    producer = connection.Producer(channel)
    _publish(producer, queue, 0, swept)
    _publish(producer, queue, 1, other)
    _publish(producer, queue, 2, swept)
    received = _consume(connection, channel, queue, 2, prefetch=2)
    by_task = {message.headers["task"]: message for message in received}
    assert set(by_task) == {swept, other}
    # The other task's delivery is recorded in Redis as kombu does; the swept one's is not.
    assert _unacked_tags(channel) == {by_task[other].delivery_tag}
    # Both count against the prefetch limit: the third message stays on the queue.
    assert not channel.qos.can_consume()
    assert channel._create_client().llen(queue.name) == 1
    for message in received:
        message.ack()
    assert _unacked_tags(channel) == set()
    assert channel.qos.can_consume()
    channel.close()


def _queued(client, queue: Queue) -> list[dict]:
    """The queue's messages from the end BRPOP takes first, each as (n, redelivered)."""
    queued = []
    for raw in reversed(client.lrange(queue.name, 0, -1)):
        message = json.loads(raw)
        body = json.loads(base64.b64decode(message["body"]))
        queued.append((body["n"], message["properties"]["delivery_info"].get("redelivered", False)))
    return queued


@redis_only
def test_a_reject_and_a_clean_close_put_swept_deliveries_back_as_kombu_does(swept_queue):
    connection, queue = swept_queue
    swept = settings.AGENTRY_BROKER_SWEPT_TASKS[0]
    channel = connection.channel()
    producer = connection.Producer(channel)
    for n in range(3):
        _publish(producer, queue, n, swept)
    first, second = _consume(connection, channel, queue, 2, prefetch=2)
    assert (first.payload["n"], second.payload["n"]) == (0, 1)
    client = channel._create_client()
    first.reject(requeue=True)
    # As kombu's own reject with requeue: pushed at the far end, marked redelivered.
    assert _queued(client, queue) == [(2, False), (0, True)]
    channel.close()  # a clean shutdown: the delivery not acknowledged goes back, at the near end
    assert _queued(client, queue) == [(1, True), (2, False), (0, True)]
    assert _unacked_tags(channel) == set()
    connection.channel().close()  # a later close puts nothing back twice
    assert len(_queued(client, queue)) == 3
