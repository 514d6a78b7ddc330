"""Wake-ups for live event streams.

Events are rows; a stream reads them. After an event commits, its run's Redis channel gets a
PUBLISH so that streams waiting on that run look at once instead of at their next timed poll
(all but a new run's first: nothing can watch a run before the statement creating it commits).
A lost wake-up only delays a stream until that poll; without Redis (the embedded setup) the
streams simply poll.

Each web process holds one Redis subscription for all its streams: a stream costs a set entry
and an asyncio.Event, not a connection or a thread. A worker's engine loop publishes without
waiting: the wake-ups its runs give in one turn of the loop go out as one pipelined round trip,
while the runs go on.

A wake-up says which kind of event committed: any (LOOK), or one that may have settled the run,
ended or parked for a person (SETTLED). A request that waits only for the outcome (a plain chat
completion) watches with `settles_only` and is woken by the latter alone: a run's dozen other
events no longer each cost it a read of the run.
"""

import asyncio
import logging
import os
import weakref
from contextlib import asynccontextmanager

import redis
import redis.asyncio as aioredis
from django.conf import settings

from platform_site.green import carrying_loop, on_loop_close

log = logging.getLogger(__name__)

CHANNEL_PREFIX = "agentry:run-events:"
SUBSCRIBE_WAIT_SECONDS = 2.0
LOOK = b"1"
SETTLED = b"2"

_publisher: tuple[int, redis.Redis] | None = None


def _channel(run_id) -> str:
    return f"{CHANNEL_PREFIX}{run_id}"


def publish_run_event(run_id, *, settles: bool = False) -> None:
    """Tell the run's watchers to look; `settles`: the event may have ended or parked the run."""
    global _publisher
    if not settings.REDIS_URL:
        return
    data = SETTLED if settles else LOOK
    loop = carrying_loop()
    if loop is not None:
        _loop_publisher(loop).publish(_channel(run_id), data)
        return
    if _publisher is None or _publisher[0] != os.getpid():
        # Short timeouts: a Redis outage must not stall the run that emitted the event.
        _publisher = (os.getpid(), redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1))
    try:
        _publisher[1].publish(_channel(run_id), data)
    except redis.RedisError as exc:
        log.warning("run event wake-up not published (streams fall back to polling): %s", exc)


class _LoopPublisher:
    """Wake-ups from code an event loop carries: queued, and sent by a task on that loop as one
    pipeline per batch (a wake-up only says "look", so one per channel and batch is enough: the
    settling kind if any of the batch's was)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._client = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
        self._pending: dict[str, bytes] = {}
        self._sender: asyncio.Task | None = None
        on_loop_close(loop, self._close)

    def publish(self, channel: str, data: bytes) -> None:
        if self._pending.get(channel) != SETTLED:
            self._pending[channel] = data
        # A sender still running picks the channel up before it ends (it checks after each send).
        if self._sender is None or self._sender.done():
            self._sender = self._loop.create_task(self._send(), name="run-event-wakeups")

    async def _close(self) -> None:
        # The wake-ups still queued go out first: a stream would otherwise wait for its poll.
        if self._sender is not None:
            await asyncio.wait([self._sender])
        await self._client.aclose()

    async def _send(self) -> None:
        while self._pending:
            channels, self._pending = self._pending, {}
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for channel, data in channels.items():
                        pipe.publish(channel, data)
                    await pipe.execute()
            except (redis.RedisError, OSError) as exc:
                log.warning("run event wake-ups not published (streams fall back to polling): %s", exc)


_loop_publishers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPublisher]" = weakref.WeakKeyDictionary()


def _loop_publisher(loop: asyncio.AbstractEventLoop) -> _LoopPublisher:
    publisher = _loop_publishers.get(loop)
    if publisher is None:
        publisher = _loop_publishers[loop] = _LoopPublisher(loop)
    return publisher


class Wake:
    """Set when the run may have new events (with `settles_only`, when it may have ended or
    parked); `wait` returns False when the timeout passed."""

    def __init__(self, poll_seconds: float, *, settles_only: bool = False):
        self.poll_seconds = poll_seconds
        self.settles_only = settles_only
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    async def wait(self) -> bool:
        try:
            await asyncio.wait_for(self._event.wait(), self.poll_seconds)
        except TimeoutError:
            return False
        return True


class RedisWaker:
    """One subscriber connection per event loop, shared by every stream of the process."""

    def __init__(self, url: str):
        # Connecting gives up quickly (an unreachable Redis means polling, not a stalled stream);
        # reads have no timeout because the reader waits on the subscription by design.
        self._client = aioredis.Redis.from_url(url, socket_connect_timeout=SUBSCRIBE_WAIT_SECONDS)
        self._pubsub = self._client.pubsub()
        self._wakes: dict[str, set[Wake]] = {}
        self._confirmed: dict[str, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None

    @asynccontextmanager
    async def watch(self, run_id, *, settles_only: bool = False):
        channel = _channel(run_id)
        wake = Wake(settings.AGENTRY_SSE_KEEPALIVE_SECONDS, settles_only=settles_only)
        wakes = self._wakes.setdefault(channel, set())
        wakes.add(wake)
        try:
            if channel not in self._confirmed:
                self._confirmed[channel] = asyncio.get_running_loop().create_future()
                await self._pubsub.subscribe(channel)
                if self._reader is None or self._reader.done():
                    self._reader = asyncio.create_task(self._read(), name="run-event-wakeups")
            # Until Redis confirms, a PUBLISH could pass unseen; the first read must come after.
            await asyncio.wait_for(asyncio.shield(self._confirmed[channel]), SUBSCRIBE_WAIT_SECONDS)
        except (redis.RedisError, OSError, TimeoutError) as exc:
            log.warning("run event wake-ups unavailable, polling instead: %s", exc)
            wake.poll_seconds = settings.AGENTRY_SSE_POLL_SECONDS
            future = self._confirmed.get(channel)
            if future is not None and not future.done():
                self._confirmed.pop(channel, None)  # the next stream of this run subscribes again
        try:
            yield wake
        finally:
            wakes.discard(wake)
            if not wakes:
                self._wakes.pop(channel, None)
                self._confirmed.pop(channel, None)
                try:
                    await self._pubsub.unsubscribe(channel)
                except (redis.RedisError, OSError):
                    pass

    async def _read(self) -> None:
        while True:
            try:
                message = await self._pubsub.get_message(timeout=5.0)
            except (redis.RedisError, OSError) as exc:
                log.warning("run event wake-up connection lost: %s", exc)
                # Whatever was published meanwhile is unknown: every stream looks again.
                for wakes in self._wakes.values():
                    for wake in wakes:
                        wake.set()
                await asyncio.sleep(1)
                continue
            if not message:
                continue
            channel = message["channel"].decode()
            if message["type"] == "message":
                settled = message["data"] == SETTLED
                for wake in self._wakes.get(channel, ()):
                    if settled or not wake.settles_only:
                        wake.set()
            elif message["type"] == "subscribe":
                future = self._confirmed.get(channel)
                if future is not None and not future.done():
                    future.set_result(True)


class PollingWaker:
    @asynccontextmanager
    async def watch(self, run_id, *, settles_only: bool = False):
        yield Wake(settings.AGENTRY_SSE_POLL_SECONDS, settles_only=settles_only)


_wakers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RedisWaker | PollingWaker]" = weakref.WeakKeyDictionary()


def get_waker() -> RedisWaker | PollingWaker:
    loop = asyncio.get_running_loop()
    if loop not in _wakers:
        _wakers[loop] = RedisWaker(settings.REDIS_URL) if settings.REDIS_URL else PollingWaker()
    return _wakers[loop]
