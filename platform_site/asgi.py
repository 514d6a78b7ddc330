"""The web server's application: Django's ASGI handler for async views, one thread hop for the rest.

Under ASGI Django runs a synchronous view's middleware hooks, signals and the view itself as
separate hops between the event loop and the request's thread: about twenty for one API post,
each a hand-over between threads, together about a third of the post's CPU (measured). A request
to a synchronous view (every API resource, the admin, the pages) is therefore served by Django's
WSGI handler, in one call on one thread, as a threaded WSGI server would: the body is read on
the loop, the whole request is handled on a thread kept between requests, and the answer is sent
from the loop. Async views (event streams, chat completions, the streamed export) keep Django's
ASGI handler, which lets them wait without holding a thread.

A path under a registered prefix (platform_site.asgi_mounts: A2A's routes, an SDK's own Starlette
application) is handed to that application instead, without Django's middleware.

Either way the body is counted against its limit as it arrives, before anything else looks at
the request (platform_site.body_limit): too large, it is refused with a 413, never read whole.
"""

import asyncio
import os
import re
import weakref
from concurrent.futures import ThreadPoolExecutor
from tempfile import SpooledTemporaryFile

from asgiref.sync import SyncToAsync, ThreadSensitiveContext, iscoroutinefunction
from asgiref.wsgi import WsgiToAsgiInstance
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.handlers.wsgi import WSGIHandler
from django.urls import Resolver404, get_resolver, resolve

from platform_site.asgi_mounts import asgi_mounted
from platform_site.body_limit import (
    BodyTooLarge,
    BodyTooSlow,
    body_limit,
    declared_over,
    refuse,
    refuse_slow,
    within,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
django_application = get_asgi_application()
django_wsgi = WSGIHandler()
# Its modules read models: imported once Django is set up.

# The URLconf imports every view (the API's, the admin's, drf-spectacular's): loaded now, when
# the process starts, rather than by its first request, which would wait for it on the event
# loop, every other request with it (about 0.4 s here).
get_resolver().url_patterns  # noqa: B018

# Django gives each request its own thread for the request's synchronous parts (signals,
# middleware hooks, session lookups), kept until the response is finished: for an event stream
# open for minutes, an idle thread per stream. Long-lived endpoints share one such thread
# instead; their synchronous parts are a few short calls, and their queries run on the
# default pool (platform_site.asyncdb).
LONG_LIVED_PATHS = re.compile(r"^/api/v1/runs/[^/]+/events/$|^/v1/chat/completions$")
_long_lived_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="long-lived-requests")


class _RequestThreads:
    """Single-thread executors kept between requests, one lent to each request in flight.

    Left alone, a thread would be started for every request and stopped at its end. A request
    still has one thread to itself (its connections and transaction stay on it), as a threaded
    WSGI server gives it; the thread is simply not new.
    """

    def __init__(self, keep: int):
        self._keep = keep
        self._idle: list[ThreadPoolExecutor] = []

    def take(self) -> ThreadPoolExecutor:
        return self._idle.pop() if self._idle else ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give(self, executor: ThreadPoolExecutor) -> None:
        if len(self._idle) < self._keep:
            self._idle.append(executor)
        else:
            executor.shutdown(wait=False)


# Threads lent to requests running (at most AGENTRY_WEB_REQUEST_THREADS) and to answers whose async
# stream is still being sent; a burst beyond starts more, then lets them go.
_request_threads = _RequestThreads(keep=64)

# How many requests run Django's handler at once in one process (AGENTRY_WEB_REQUEST_THREADS); the
# others wait on the loop, holding no thread and no database connection. Two reasons: a burst of
# requests waits for its turn on the loop instead of in a thread each, queued on the connection
# pool (20 connections, its timeout a 503); and a post spends about a third of its time waiting on
# PostgreSQL and Redis, so a few threads keep a core busy while more only contend for the
# interpreter lock (one process, 32 concurrent posts: 5.6-5.8 ms of CPU per post uncapped,
# 4.9-5.1 ms capped at 4; measured).
_handler_slots: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = weakref.WeakKeyDictionary()


def _slots() -> asyncio.Semaphore:
    """This loop's limit (a semaphore belongs to one loop; tests drive the app from several)."""
    loop = asyncio.get_running_loop()
    slots = _handler_slots.get(loop)
    if slots is None:
        slots = _handler_slots[loop] = asyncio.Semaphore(settings.AGENTRY_WEB_REQUEST_THREADS)
    return slots


def _served_async(scope) -> bool:
    """Whether the view the path names is a coroutine function (a path no view answers is not)."""
    path = scope["path"]
    root = scope.get("root_path", "")
    try:
        match = resolve(path[len(root) :] if root and path.startswith(root) else path)
    except Resolver404:
        return False
    return iscoroutinefunction(match.func)


async def _read_body(receive) -> SpooledTemporaryFile | None:
    """The request body, spooled to disk past the upload memory limit as Django's handler does;
    None if the client went away first. `receive` counts it against the body limit
    (platform_site.body_limit), so at most the limit is written."""
    body = SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b")
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                body.close()
                return None
            body.write(message.get("body", b""))
            if not message.get("more_body"):
                break
    except (BodyTooLarge, BodyTooSlow):
        body.close()
        raise
    body.seek(0)
    return body


def _environ(scope, body: SpooledTemporaryFile) -> dict:
    # asgiref's own translation of an ASGI scope into a WSGI environ.
    translator = WsgiToAsgiInstance(django_wsgi)
    translator.scope = scope
    environ = translator.build_environ(scope, body)
    # The body was read whole: its length is known even when the client sent it in chunks.
    environ["CONTENT_LENGTH"] = str(body.seek(0, os.SEEK_END))
    body.seek(0)
    return environ


def _serve_on_thread(scope, body, loop: asyncio.AbstractEventLoop, send):
    """Run Django's WSGI handler for the request. Returns the answer's start message and either
    its content (a complete answer, for the loop to send) or the response itself (a stream of
    an async iterator, which the loop reads, as Django's ASGI handler would); a stream of a plain
    iterator (a static file) is sent from here as it is read, and None is returned."""
    started = {}

    def start_response(status: str, headers, exc_info=None):
        started["status"] = int(status.split(" ", 1)[0])
        started["headers"] = [(name.lower().encode("latin1"), value.encode("latin1")) for name, value in headers]

    response = django_wsgi(_environ(scope, body), start_response)
    start = {"type": "http.response.start", "status": started["status"], "headers": started["headers"]}
    if response.streaming and response.is_async:
        return start, response  # closed by the caller once the loop has read it
    try:
        if not response.streaming:
            return start, response.content

        def relay(message) -> None:
            asyncio.run_coroutine_threadsafe(send(message), loop).result()

        relay(start)
        for chunk in response:
            relay({"type": "http.response.body", "body": chunk, "more_body": True})
        relay({"type": "http.response.body", "body": b""})
        return None
    finally:
        # As a WSGI server does once the answer is out: Django's request_finished (connections back).
        response.close()


async def _serve_sync_view(scope, receive, send) -> None:
    body = await _read_body(receive)
    if body is None:
        return
    loop = asyncio.get_running_loop()
    executor = None
    try:
        async with _slots():
            # Taken once the request may run: a request waiting for its turn holds no thread.
            executor = _request_threads.take()
            answered = await loop.run_in_executor(executor, _serve_on_thread, scope, body, loop, send)
        # The slot is free again; the thread stays lent to the request until its answer is out
        # (its connection is given back on that thread, when the response is closed).
        if answered is None:
            return
        start, content = answered
        if isinstance(content, bytes):
            await send(start)
            await send({"type": "http.response.body", "body": content})
            return
        # A view's async stream (the admin's export): read here, so no thread waits on it, and
        # one part at a time is held in memory; it holds no slot meanwhile.
        try:
            await send(start)
            async for part in content:
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await loop.run_in_executor(executor, content.close)
    finally:
        if executor is not None:
            _request_threads.give(executor)
        body.close()


async def application(scope, receive, send):
    # uvicorn starts the next request of a kept-alive connection from inside the task of the one
    # before, so it inherits that request's thread-sensitive context; after a long-lived request
    # that context has exited and every sync call of the next request would fail (a 500).
    SyncToAsync.thread_sensitive_context.set(None)
    if scope["type"] != "http":
        return await django_application(scope, receive, send)
    # Before anything reads the body, on every path (Django's ASGI handler reads it whole too).
    limit = body_limit(scope)
    if declared_over(scope, limit):
        return await refuse(scope, send, limit)
    seconds = settings.AGENTRY_BODY_TIMEOUT_SECONDS
    try:
        await _serve(scope, within(receive, limit, seconds), send)
    except BodyTooLarge:
        # Raised only while the body is read, before any part of an answer was sent.
        await refuse(scope, send, limit)
    except BodyTooSlow:
        await refuse_slow(scope, send, seconds)


async def _serve(scope, receive, send) -> None:
    mounted = asgi_mounted(scope["path"])
    if mounted is not None:
        return await mounted(scope, receive, send)
    if LONG_LIVED_PATHS.match(scope["path"]):
        async with ThreadSensitiveContext(executor=_long_lived_executor):
            return await django_application(scope, receive, send)
    if _served_async(scope):
        return await django_application(scope, receive, send)
    return await _serve_sync_view(scope, receive, send)
