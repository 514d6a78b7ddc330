"""Plain code that waits cooperatively when an event loop carries it.

The engine's steps are plain (synchronous) code: read the run, write the ledger, call the model,
run a tool. A worker process carries hundreds of runs at once on one asyncio event loop
(engine.reactor) by running each run's plain code in a greenlet: where the code would wait on
the network (a model's answer, a tool, a backoff), it hands an awaitable to the loop and the
loop runs other runs until the answer is there. Anywhere else (the test suite, the CLI, the
web process) the same functions simply block, so there is one code path for every deployment.

The technique is the one SQLAlchemy's asyncio layer uses (greenlet_spawn / await_only).
Database statements are not awaited: they are short round trips on a nearby server, made one
at a time by the loop's thread, and a greenlet never yields while it holds a transaction open
(so one connection per process serves every run it carries).
"""

import asyncio
import concurrent.futures
import logging
import time
import types
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from django.db import connections
from greenlet import getcurrent, greenlet

from platform_site.dbpool import release_connection

T = TypeVar("T")
log = logging.getLogger(__name__)

# Tools and other blocking calls a carried run makes go to threads, so they never stall the loop.
_offload = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="green-offload")


class _Carried(greenlet):
    """A greenlet whose plain code may hand awaitables to the loop that drives it."""

    def __init__(self, fn, driver, loop: asyncio.AbstractEventLoop):
        super().__init__(fn, driver)
        self.driver = driver
        self.loop = loop
        self.locals = types.SimpleNamespace()  # this run's database connections (green_db)


def carried() -> bool:
    """Whether this code runs in a greenlet driven by an event loop."""
    return isinstance(getcurrent(), _Carried)


def carrying_loop() -> asyncio.AbstractEventLoop | None:
    """The loop that carries this code, if one does."""
    current = getcurrent()
    return current.loop if isinstance(current, _Carried) else None


def await_(awaitable: Awaitable[T]) -> T:
    """The awaitable's result, from carried code: the loop runs other work meanwhile.

    A pooled database connection is handed back first (never mid-transaction): a run waiting
    on the network holds none."""
    current = getcurrent()
    if not isinstance(current, _Carried):
        raise RuntimeError("await_() needs carried code (platform_site.green.spawn)")
    release_connection()
    return current.driver.switch(awaitable)


def offload(fn: Callable[..., T], *args, **kwargs) -> T:
    """Run a blocking call: in a thread when carried (the loop goes on meanwhile), else here."""
    current = getcurrent()
    if not isinstance(current, _Carried):
        return fn(*args, **kwargs)
    return await_(current.loop.run_in_executor(_offload, partial(_closing, fn, args, kwargs)))


def wait(future: "concurrent.futures.Future[T]", timeout: float | None = None) -> T:
    """The result of work a thread pool does, waited for at most `timeout` seconds (then
    TimeoutError; the work itself goes on, as with Future.result). Carried, the loop awaits it
    and carries the other runs meanwhile: the work costs one hand-over to its thread and one back,
    where offloading a call that waits for it would add a thread in between."""
    current = getcurrent()
    if not isinstance(current, _Carried):
        return future.result(timeout=timeout)
    # Shielded: a timeout leaves the pool's future alone, as Future.result does.
    return await_(asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future, loop=current.loop)), timeout))


def sleep(seconds: float) -> None:
    if carried():
        await_(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


def _closing(fn, args, kwargs):
    try:
        return fn(*args, **kwargs)
    finally:
        # Offload threads are reused, and a carried run's connections are its own (green_db):
        # what a call opened goes back to the pool when it ends.
        connections.close_all()


async def spawn(fn: Callable[..., T], *args, **kwargs) -> T:
    """Run plain `fn` in a carried greenlet on the running loop; its waits become awaits.

    While the plain code runs, the loop is not marked as running in this thread: the code is
    plain (Django refuses database calls where it sees a running loop) and reaches the loop
    only through await_(). An exception raised by an awaitable is raised where it was awaited."""
    loop = asyncio.get_running_loop()
    child = _Carried(partial(_closing, fn, args, kwargs), getcurrent(), loop)
    value, thrown, started = None, None, False
    while True:
        asyncio._set_running_loop(None)
        try:
            if not started:
                started = True
                outcome = child.switch()
            elif thrown is not None:
                outcome = child.throw(thrown)
            else:
                outcome = child.switch(value)
        finally:
            asyncio._set_running_loop(loop)
        if child.dead:
            return outcome
        try:
            value, thrown = await outcome, None
        except BaseException as exc:  # noqa: BLE001 - handed to the plain code that awaited it
            value, thrown = None, exc


_closers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Callable[[], Awaitable]]]" = (
    weakref.WeakKeyDictionary()
)


def on_loop_close(loop: asyncio.AbstractEventLoop, closer: Callable[[], Awaitable]) -> None:
    """Have `closer()` awaited when the loop's resources are closed (loop_resources_close):
    clients a carried run opened on the loop (HTTP sessions, Redis connections) live as long as it."""
    _closers.setdefault(loop, []).append(closer)


async def loop_resources_close(loop: asyncio.AbstractEventLoop) -> None:
    for closer in _closers.pop(loop, []):
        try:
            await closer()
        except Exception:  # closing idle connections at exit is a courtesy, not a duty
            log.debug("closing a carried client failed", exc_info=True)


__all__ = [
    "await_",
    "carried",
    "carrying_loop",
    "loop_resources_close",
    "offload",
    "on_loop_close",
    "sleep",
    "spawn",
    "wait",
]
