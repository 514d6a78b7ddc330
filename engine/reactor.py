"""One event loop per worker process, carrying every run the process advances.

A Celery worker thread that takes a run hands it here and waits for the run's slice to end;
its wait is a blocked future (no CPU), so the broker's acknowledgement after the task
(acks_late), its prefetch limit and the worker's concurrency keep their meaning. The run's
plain code (engine.loop) runs in a greenlet on this process's one loop (platform_site.green):
its model calls are awaited there on one aiohttp session, its tools run on the tool executors'
threads while the loop awaits them, and its ledger writes are made between two waits by the
loop's thread. So a process carries hundreds of runs with one thread doing their work, instead
of hundreds of threads contending for the interpreter lock while they wait on models.

Only a worker process carries runs this way (worker_init, with AGENTRY_ENGINE_LOOP on, the
default); anywhere else (the tests, the CLI, an eager call) the same code runs where it is called.
"""

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from typing import TypeVar

import uvloop
from celery.signals import worker_init, worker_process_init, worker_shutdown
from django.conf import settings

from platform_site import green_db
from platform_site.green import spawn
from platform_site.green_http import carried_clients_close

log = logging.getLogger(__name__)
T = TypeVar("T")


class Reactor:
    def __init__(self):
        self.enabled = False
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def carry(self, fn: Callable[..., T], /, **kwargs) -> T:
        """fn(**kwargs), carried by this process's loop when enabled, else called here."""
        if not self.enabled:
            return fn(**kwargs)
        future = asyncio.run_coroutine_threadsafe(spawn(fn, **kwargs), self._running_loop())
        return future.result()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            alive = self._thread is not None and self._thread.is_alive()
            if self._loop is None or self._pid != os.getpid() or not alive:
                # A forked child (a prefork pool) starts its own loop: the parent's thread is not in it.
                self._pid = os.getpid()
                # uvloop: the loop turns over for every statement and model chunk of hundreds of
                # runs; its C implementation took about 5 % off a run's worker CPU, measured.
                self._loop = uvloop.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="engine-loop", daemon=True)
                self._thread.start()
            return self._loop

    def stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None or not thread.is_alive() or self._pid != os.getpid():
            return
        try:
            asyncio.run_coroutine_threadsafe(carried_clients_close(loop), loop).result(timeout=5)
        except Exception:  # closing idle connections at exit is a courtesy, not a duty
            log.debug("closing the engine loop's HTTP session failed", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


reactor = Reactor()


@worker_init.connect
@worker_process_init.connect
def _carry_runs_in_workers(**kwargs) -> None:
    reactor.enabled = settings.AGENTRY_ENGINE_LOOP
    if reactor.enabled:
        green_db.install()


@worker_shutdown.connect
def _stop_loop(**kwargs) -> None:
    reactor.stop()
