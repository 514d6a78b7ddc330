"""HTTP for carried code (platform_site.green): an httpx client whose requests are made by
aiohttp on the event loop that carries the calling run.

The callers keep httpx's plain API (httpx.Client.stream, its exceptions, httpx_sse), so a model
adapter has one implementation whoever runs it. Underneath, each request is awaited on the
loop with aiohttp: measured here, it keeps hundreds of connections in flight at a fraction of
the CPU of httpx's own async pool, which slows down with hundreds of connections
(encode/httpx#3215). aiohttp's errors become the httpx errors they correspond to, so an error
message (a refused connection, a read timeout, a cut stream) reads the same on both paths.
"""

import asyncio
import os
import weakref
from collections.abc import Iterator

import aiohttp
import httpx

from platform_site.green import await_, carrying_loop, loop_resources_close, on_loop_close

# One worker process keeps every run it carries waiting on its model at once.
_CONNECTIONS = 1000
# Below the idle timeout of common servers (uvicorn and Node close after 5 s): aiohttp checks
# the age when it takes a connection from the pool, so a connection the server is about to
# close (or has closed while this busy loop had not yet read the notice) is not sent a request.
_KEEPALIVE_SECONDS = 4


def _as_httpx_error(exc: BaseException, request: httpx.Request) -> Exception:
    """The httpx error an aiohttp (or asyncio) error stands for."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(text, request=request)
    if isinstance(exc, TimeoutError):  # waiting for the headers or the body (sock_read)
        return httpx.ReadTimeout(text, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        # Said as the operating system says it ("Connection refused"), as httpx does.
        number = getattr(exc.os_error, "errno", None)
        return httpx.ConnectError(f"[Errno {number}] {os.strerror(number)}" if number else text, request=request)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(text, request=request)
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return httpx.RemoteProtocolError(text, request=request)
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return httpx.ReadError(text, request=request)
    return exc


def _as_httpx_response(response: aiohttp.ClientResponse, request: httpx.Request, stream) -> httpx.Response:
    extensions = {"http_version": b"HTTP/1.1"}
    if response.reason:
        extensions["reason_phrase"] = response.reason.encode()
    return httpx.Response(
        status_code=response.status,
        headers=list(response.raw_headers),
        stream=stream,
        request=request,
        extensions=extensions,
    )


class _AsyncBody(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request):
        self._response = response
        self._request = request

    async def __aiter__(self):
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _as_httpx_error(exc, self._request) from exc

    async def aclose(self) -> None:
        self._response.release()


async def _note_reuse(session, context, params) -> None:
    context.trace_request_ctx["reused"] = True


def _reuse_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_note_reuse)
    return trace


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx's async transport interface over one aiohttp session (created on first use, on
    the loop that uses it).

    A request sent on a pooled connection that the server had closed meanwhile (an idle
    timeout racing the reuse, more likely while a busy loop is late reading the server's
    notice) fails before any answer: it is sent once more on a new connection, as httpx's own
    pool does by checking a connection before reusing it. The server never read it: a server
    closes only a connection it considers idle."""

    def __init__(self):
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=_CONNECTIONS,
                keepalive_timeout=_KEEPALIVE_SECONDS,
                ssl=httpx.create_ssl_context(trust_env=False),
            )
            # Redirects, decompression and cookies are httpx's business (or nobody's).
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                trace_configs=[_reuse_trace()],
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._head(request)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _as_httpx_error(exc, request) from exc
        return _as_httpx_response(response, request, _AsyncBody(response, request))

    async def handle_whole(self, request: httpx.Request) -> httpx.Response:
        """The response with its whole body, read in the same await: for an unstreamed model
        call, whose body is read at once anyway. It skips what a streamed body costs on each
        chunk (a wrapped stream on each side of the greenlet switch). The body is decoded as
        httpx decodes it (Content-Encoding). An error while the body is read says how much of it
        had arrived (`received_bytes`)."""
        try:
            response = await self._head(request)
            try:
                content = await response.read()
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                error = _as_httpx_error(exc, request)
                error.received_bytes = response.content.total_bytes
                raise error from exc
            finally:
                response.release()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _as_httpx_error(exc, request) from exc
        whole = _as_httpx_response(response, request, httpx.ByteStream(content))
        whole.read()
        return whole

    async def _head(self, request: httpx.Request) -> aiohttp.ClientResponse:
        """The response, up to its headers; sent once more on a new connection when a reused one
        turned out closed (see the class)."""
        try:
            return await self._send(request, reused := {})
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            if not reused.get("reused"):
                raise
            return await self._send(request, {})

    async def _send(self, request: httpx.Request, noted: dict) -> aiohttp.ClientResponse:
        timeout = request.extensions.get("timeout", {})
        limits = aiohttp.ClientTimeout(total=None, sock_connect=timeout.get("connect"), sock_read=timeout.get("read"))
        return await self._client().request(
            request.method,
            str(request.url),
            headers=list(request.headers.multi_items()),
            data=request.content or None,
            allow_redirects=False,
            compress=None,
            timeout=limits,
            trace_request_ctx=noted,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class _CarriedBody(httpx.SyncByteStream):
    """An async body read from plain code: each chunk is awaited on the carrying loop."""

    def __init__(self, stream: httpx.AsyncByteStream):
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        chunks = self._stream.__aiter__()
        while True:
            try:
                yield await_(chunks.__anext__())
            except StopAsyncIteration:
                return

    def close(self) -> None:
        await_(self._stream.aclose())


class CarriedTransport(httpx.BaseTransport):
    """A plain httpx transport for carried code: the request is awaited on the loop."""

    def __init__(self):
        self._transport = AiohttpTransport()

    def handle_whole(self, request: httpx.Request) -> httpx.Response:
        """The response with its body read, awaited in one switch (AiohttpTransport.handle_whole)."""
        return await_(self._transport.handle_whole(request))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = await_(self._transport.handle_async_request(request))
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CarriedBody(response.stream),
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._transport.aclose()


_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.Client]" = weakref.WeakKeyDictionary()


def carried_send_whole(request: httpx.Request) -> httpx.Response:
    """Send a request built by the carried client (carried_client(loop).build_request) and
    return its response with the body read, awaited on the carrying loop in one switch."""
    return carried_client(carrying_loop())._transport.handle_whole(request)


def carried_client(loop: asyncio.AbstractEventLoop) -> httpx.Client:
    """The client for operator-configured endpoints (model providers) of code the loop carries."""
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = httpx.Client(transport=CarriedTransport(), follow_redirects=False, trust_env=False)
        on_loop_close(loop, client._transport.aclose)
    return client


async def carried_clients_close(loop: asyncio.AbstractEventLoop) -> None:
    """Close what carried runs opened on the loop: this module's HTTP session and any other
    client registered with platform_site.green.on_loop_close."""
    _clients.pop(loop, None)
    await loop_resources_close(loop)
