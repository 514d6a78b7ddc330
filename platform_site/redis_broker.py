"""kombu's Redis transport, with one client per channel for its publishing and its bookkeeping.

kombu builds a new redis-py client around the channel's connection pool for every message it
publishes, every delivered message it records as unacknowledged and every acknowledgement
(Channel.conn_or_acquire → _create_client). Building one fills its table of about 200 response
callbacks: 98 µs of CPU here, close to the 133 µs of the pipeline it then sends. A worker did it
twice per run and a post once; on a worker it showed as about 3 % of its CPU (a profile of the
throughput figure). redis-py's client is safe to share between threads, since each command takes
a connection from the pool, so the channel keeps one. The asynchronous client the worker's BRPOP
and pub/sub use is kombu's as before; so is everything the broker stores, so messages already
queued are read the same.

Used for redis:// only (settings.CELERY_BROKER_TRANSPORT): with rediss:// kombu turns TLS on
from the transport's name, which a class path does not carry.
"""

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
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
