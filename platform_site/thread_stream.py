"""A long synchronous generator (a database export) served as an async stream.

Django's ASGI handler would read a synchronous streaming body to the end into a list before
sending any of it; handing each `next()` to a thread pool instead would move the generator's
server-side cursor between threads and their connections. So one thread of its own drives the
generator, with its own database connection, and hands chunks over through a small queue: the
producer waits while the client reads slowly, which is what bounds the memory.
"""

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator

from django.db import connections

# Chunks waiting for the client; the producer blocks beyond this.
QUEUE_CHUNKS = 8
_DONE = object()


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _produce(make: Callable[[], Iterator], out: queue.Queue, stop: threading.Event) -> None:
    def put(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    try:
        for chunk in make():
            if not put(chunk):
                return
        put(_DONE)
    except BaseException as exc:  # handed to the reader, who raises it where the response is served
        put(_Failed(exc))
    finally:
        # The thread's connections (a server-side cursor's among them) end with it.
        connections.close_all()


async def thread_stream(make: Callable[[], Iterator]) -> AsyncIterator:
    """The chunks of `make()`, produced on a thread of their own, as an async iterator. Closing
    the iterator early (the client went away) stops the producer at its next chunk."""
    out: queue.Queue = queue.Queue(maxsize=QUEUE_CHUNKS)
    stop = threading.Event()
    thread = threading.Thread(target=_produce, args=(make, out, stop), name="thread-stream", daemon=True)
    thread.start()
    try:
        while True:
            # A bounded wait, so that a reader cancelled mid-wait leaves no pool thread blocked.
            try:
                item = await asyncio.to_thread(out.get, True, 0.5)
            except queue.Empty:
                if not thread.is_alive():
                    raise RuntimeError("the stream's producer ended without finishing") from None
                continue
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        stop.set()
