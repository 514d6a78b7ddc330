"""kombu's Redis transport, with one client per channel for its publishing and its bookkeeping,
and no Redis bookkeeping for the deliveries of tasks the run sweeper already recovers.

kombu builds a new redis-py client around the channel's connection pool for every message it
publishes, every delivered message it records as unacknowledged and every acknowledgement
(Channel.conn_or_acquire → _create_client). Building one fills its table of about 200 response
callbacks: 98 µs of CPU here, close to the 133 µs of the pipeline it then sends. A worker did it
twice per run and a post once; on a worker it showed as about 3 % of its CPU (a profile of the
throughput figure). redis-py's client is safe to share between threads, since each command takes
a connection from the pool, so the channel keeps one. The asynchronous client the worker's BRPOP
and pub/sub use is kombu's as before; so is everything the broker stores, so messages already
queued are read the same.

kombu emulates acknowledgements on Redis: each delivery is written to an "unacked" hash and index
before the task starts and removed when it is acknowledged (two pipelines, each a round trip
made on the consumer's one thread), so that a message whose worker died is handed out again once
its visibility timeout passes. For a run's hand-over that buys nothing: the visibility timeout
is longer than the longest hold of any task (over an hour, settings), while the run sweeper
hands a run whose message was lost to the queue again within minutes (a queued run not taken,
a lapsed lease). The deliveries of the tasks named in AGENTRY_BROKER_SWEPT_TASKS are therefore
tracked in the worker's memory only (kombu's own in-memory QoS, which still bounds them by the
prefetch limit and puts them back on the queue at a clean shutdown, or on a reject with
requeue); every other task keeps kombu's emulation unchanged.

Used for redis:// only (settings.CELERY_BROKER_TRANSPORT): with rediss:// kombu turns TLS on
from the transport's name, which a class path does not carry.
"""

from django.conf import settings
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual


class QoS(kombu_redis.QoS):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._swept_tasks = frozenset(settings.AGENTRY_BROKER_SWEPT_TASKS)
        # The delivery tags held here only; a set's add and discard are atomic, and Celery may
        # acknowledge from another thread than the one that consumes.
        self._in_memory: set[str] = set()

    def append(self, message, delivery_tag):
        if (message.headers or {}).get("task") in self._swept_tasks:
            self._in_memory.add(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
        else:
            super().append(message, delivery_tag)

    def ack(self, delivery_tag):
        if delivery_tag in self._in_memory:
            self._in_memory.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)
        else:
            super().ack(delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        if delivery_tag not in self._in_memory:
            return super().reject(delivery_tag, requeue=requeue)
        if requeue:
            with self.channel.conn_or_acquire() as client:
                self._put_back(self._delivered[delivery_tag], client, leftmost=True)
        self._in_memory.discard(delivery_tag)
        virtual.QoS.ack(self, delivery_tag)

    def restore_unacked(self, client=None):
        """At a clean shutdown: every delivery not acknowledged goes back on its queue, from the
        Redis hash as kombu records it, or from here for those held in memory."""
        with self.channel.conn_or_acquire(client) as client:
            for tag, message in list(self._delivered.items()):
                if tag in self._in_memory:
                    self._put_back(message, client)
                else:
                    self.restore_by_tag(tag, client=client)
        self._delivered.clear()
        self._in_memory.clear()

    def _put_back(self, message, client, leftmost=False) -> None:
        # As kombu puts back a message it read from its hash: marked redelivered, and at the end
        # of the queue a consumer takes from next (or the other end for a rejected one).
        delivery = message.delivery_info
        self.channel._do_restore_message(message._raw, delivery["exchange"], delivery["routing_key"], client, leftmost)


class Channel(kombu_redis.Channel):
    QoS = QoS
    _shared_client = None

    def _create_client(self, asynchronous=False):
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._shared_client
        # A channel that was closed and used again has a new pool: a client follows it.
        if client is None or client.connection_pool is not self.pool:
            client = self._shared_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
