"""PostgreSQL waits in carried code (platform_site.green) made through the event loop.

psycopg runs every operation as a generator that says when it would block (wait to read or
to write the socket); its plain `wait` blocks the thread in a selector. For carried code the
same generator is driven by the loop instead: the run waiting on the database hands the loop
over, and other runs go on. Anywhere else psycopg's own wait is used, unchanged.
"""

import asyncio
import weakref

import psycopg.waiting
from django.db import connections
from greenlet import getcurrent
from psycopg import errors
from psycopg.waiting import READY_R, READY_W, WAIT_R, WAIT_W

from platform_site.green import _Carried

_plain_wait = psycopg.waiting.wait


def _ready(loop: asyncio.AbstractEventLoop, fileno: int, wanted) -> asyncio.Future:
    """A future set once the socket is ready as psycopg wants it. The callback that sets it also
    removes itself from the loop, rather than a done-callback of the future doing it one loop turn
    later: without that callback, its closure and its turn a carried one-row SELECT takes 1–5 %
    less CPU (three same-process comparisons). A wait that ends otherwise (a timeout, a
    cancellation) removes it in carried_wait."""
    future = loop.create_future()

    def ready(state):
        _forget(loop, fileno, wanted)
        if not future.done():
            future.set_result(state)

    if wanted != WAIT_W:
        loop.add_reader(fileno, ready, READY_R)
    if wanted != WAIT_R:
        loop.add_writer(fileno, ready, READY_W)
    return future


def _forget(loop: asyncio.AbstractEventLoop, fileno: int, wanted) -> None:
    if wanted != WAIT_W:
        loop.remove_reader(fileno)
    if wanted != WAIT_R:
        loop.remove_writer(fileno)


def carried_wait(gen, fileno: int, interval: float = 0.0, timeout: float | None = None):
    """psycopg's wait(): through the loop for carried code, psycopg's own anywhere else."""
    current = getcurrent()
    if not isinstance(current, _Carried):
        return _plain_wait(gen, fileno, interval=interval, timeout=timeout)
    loop = current.loop
    try:
        wanted = next(gen)
        while True:
            ready = _ready(loop, fileno, wanted)
            waiting = asyncio.wait_for(ready, timeout) if timeout is not None else ready
            try:
                # Not green.await_: the connection is in use, it must not be handed back here.
                state = current.driver.switch(waiting)
            except BaseException as exc:
                # A timeout or a cancellation: the callback that removes itself never ran.
                _forget(loop, fileno, wanted)
                if isinstance(exc, TimeoutError):
                    raise errors._WaitTimeout("wait timeout expired") from None
                raise
            wanted = gen.send(state)
    except StopIteration as done:
        return done.value


# The slots of carried runs in each database's pool: a free slot is awaited, not blocked on.
# Per loop, as platform_site.green_http keeps its clients: an id() of a closed loop can be reused
# by a new one, and a semaphore stays bound to the loop it first waited on.
_slots: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()


def connection_slot_take(settings_dict: dict):
    """A slot in the pool, awaited cooperatively by carried code; None elsewhere."""
    current = getcurrent()
    if not isinstance(current, _Carried):
        return None
    pool = settings_dict.get("OPTIONS", {}).get("pool") or {}
    # A few connections stay for the process's threads (the lease renewer, offloaded tools).
    size = max(1, int(pool.get("max_size", 20)) - 4) if isinstance(pool, dict) else 16
    per_database = _slots.setdefault(current.loop, {})
    semaphore = per_database.get(settings_dict.get("NAME"))
    if semaphore is None:
        semaphore = per_database[settings_dict.get("NAME")] = asyncio.Semaphore(size)
    current.driver.switch(semaphore.acquire())
    return semaphore


def connection_slot_release(slot) -> None:
    if slot is not None:
        slot.release()


class _CarriedLocal:
    """Django's per-thread connections, and one set per carried run.

    All the runs a loop carries share its thread, yet each needs connections of its own: one
    run's statement may be waiting on PostgreSQL while another run makes its own. Code that is
    not carried keeps Django's storage exactly as it was."""

    def __init__(self, fallback):
        object.__setattr__(self, "_fallback", fallback)

    def _target(self):
        current = getcurrent()
        if isinstance(current, _Carried):
            return current.locals
        return self._fallback

    def __getattr__(self, name):
        return getattr(self._target(), name)

    def __setattr__(self, name, value):
        setattr(self._target(), name, value)

    def __delattr__(self, name):
        delattr(self._target(), name)


def install() -> None:
    """Carried code gets connections of its own and waits on them through the loop (idempotent)."""
    psycopg.waiting.wait = carried_wait
    if not isinstance(connections._connections, _CarriedLocal):
        connections._connections = _CarriedLocal(connections._connections)
