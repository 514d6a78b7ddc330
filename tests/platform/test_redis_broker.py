"""kombu's Redis transport with one client per channel (platform_site.redis_broker): the broker
settings choose it for redis://, and kombu's delivery and acknowledgement bookkeeping works on a
real Redis as before."""

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
