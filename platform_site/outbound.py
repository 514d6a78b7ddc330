"""The one seam for outbound HTTP.

Every call that leaves the process goes through this module, so connection pooling,
timeouts, logging and the network guard are decided in one place. There are two kinds of
destination:

- `get_client()`: endpoints an operator configured for the platform itself (model
  providers' base URLs). They are allowed explicitly: a self-hosted model on a private
  address is a normal setup, and no model output can change where these calls go.
- `guarded_request()` / `mcp_http_client()` / `a2a_http_client()`: everything a tool reaches. A model chooses
  the arguments (and a server chooses redirects), so these connect only to public
  addresses unless the host is in AGENTRY_OUTBOUND_ALLOWLIST (see platform_site.netguard).
- `guarded_request(..., allowlist=ATTACHMENT_URLS)`: images an API client names by URL
  (attachments.fetch), checked against AGENTRY_ATTACHMENT_URL_ALLOWLIST, a list of its own.
- `guarded_request(..., allowlist=WEBHOOKS)`: webhook targets. Their URLs are typed by
  people, not models, but a URL field in the admin must not become a way to reach the
  metadata service or a database port either; internal receivers are listed in
  AGENTRY_WEBHOOK_ALLOWLIST, kept apart so that allowing a receiver does not open it to tools.

Model providers stay on `get_client()`: a self-hosted model on a private address is the
common case, only an operator with the right to change model configs sets the base URL, and
nothing a model or an API client sends can change it.

Clients are shared per process (thread-safe) and rebuilt after a fork, because a pool
inherited from the parent would share its sockets.
"""

import logging
import os
import threading
import time
from dataclasses import dataclass

import httpcore
import httpcore2
import httpx
import httpx2

from platform_site.green import carrying_loop
from platform_site.green_http import carried_client, carried_send_whole
from platform_site.netguard import GuardedAsyncBackend, GuardedBackend, GuardedHttpxAsyncBackend, OutboundBlocked

log = logging.getLogger(__name__)

__all__ = [
    "ATTACHMENT_URLS",
    "TOOLS",
    "WEBHOOKS",
    "OutboundBlocked",
    "a2a_http_client",
    "get_client",
    "guarded_request",
    "mcp_http_client",
    "send_whole",
    "timeout",
]

# Which allowlist setting a guarded request is checked against.
TOOLS = "AGENTRY_OUTBOUND_ALLOWLIST"
WEBHOOKS = "AGENTRY_WEBHOOK_ALLOWLIST"
ATTACHMENT_URLS = "AGENTRY_ATTACHMENT_URL_ALLOWLIST"
GUARDED = (TOOLS, WEBHOOKS, ATTACHMENT_URLS)

_lock = threading.Lock()
_clients: dict[str, httpx.Client] = {}
_clients_pid: int | None = None

# Generous pool: one worker process keeps many runs waiting on models at once.
_LIMITS = httpx.Limits(max_connections=500, max_keepalive_connections=200, keepalive_expiry=30)
_TOOL_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=30)


class _GuardedTransport(httpx.HTTPTransport):
    def __init__(self, allowlist: str):
        super().__init__(trust_env=False)
        # httpx has no parameter for the network backend, so the pool it built is replaced by
        # one that connects through the guard; everything else about the transport stays.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=_TOOL_LIMITS.max_connections,
            max_keepalive_connections=_TOOL_LIMITS.max_keepalive_connections,
            keepalive_expiry=_TOOL_LIMITS.keepalive_expiry,
            network_backend=GuardedBackend(allowlist),
        )


def _client(kind: str) -> httpx.Client:
    global _clients_pid
    if _clients_pid != os.getpid() or kind not in _clients:
        with _lock:
            if _clients_pid != os.getpid():
                _clients.clear()
                _clients_pid = os.getpid()
            if kind not in _clients:
                if kind in GUARDED:
                    _clients[kind] = httpx.Client(
                        transport=_GuardedTransport(kind), follow_redirects=False, trust_env=False
                    )
                else:
                    _clients[kind] = httpx.Client(limits=_LIMITS, follow_redirects=False, trust_env=False)
    return _clients[kind]


def get_client() -> httpx.Client:
    """For operator-configured platform endpoints (model providers); not address-guarded.

    Code an event loop carries (a worker's runs, platform_site.green) gets a client whose
    requests that loop awaits, so hundreds of runs wait on their models in one thread."""
    loop = carrying_loop()
    if loop is not None:
        return carried_client(loop)
    return _client("operator")


def send_whole(method: str, url: str, *, json, headers: dict, timeout: httpx.Timeout) -> httpx.Response:
    """A request to an operator-configured endpoint (an unstreamed model call) and its answer,
    body read. Code an event loop carries awaits it there in one switch, without the streamed
    body's wrapping (platform_site.green_http); elsewhere the process's client sends it. An
    httpx error raised while the body was read has `received_bytes`: how much had arrived."""
    client = get_client()
    request = client.build_request(method, url, json=json, headers=headers, timeout=timeout)
    if carrying_loop() is not None:
        return carried_send_whole(request)
    response = client.send(request, stream=True)
    try:
        response.read()
    except httpx.HTTPError as exc:
        exc.received_bytes = response.num_bytes_downloaded
        raise
    finally:
        response.close()
    return response


def timeout(seconds: float, *, connect: float = 10.0) -> httpx.Timeout:
    return httpx.Timeout(seconds, connect=min(connect, seconds))


@dataclass
class Fetched:
    response: httpx.Response  # closed; status, headers and final URL
    body: bytes
    truncated: bool  # the body was longer than max_bytes and was cut there

    def text(self) -> str:
        return self.body.decode(self.response.encoding or "utf-8", errors="replace")


def _check_url(url: httpx.URL) -> None:
    if url.scheme not in ("http", "https") or not url.host:
        raise OutboundBlocked(f"Only absolute http and https URLs can be fetched, not {str(url)[:200]!r}.")


def _origin(url: httpx.URL) -> tuple:
    return url.scheme, url.host, url.port


def _read_limited(response: httpx.Response, max_bytes: int, deadline: float) -> tuple[bytes, bool]:
    """The body, cut at max_bytes. httpx's timeouts bound each read, not the whole: a server that
    sends a byte now and then would hold the thread for ever, so the whole answer has a
    deadline too (checked as each part arrives: passed, the wait is at most one read longer)."""
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the answer did not arrive in time", request=response.request)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False


def guarded_request(
    method: str,
    url: str,
    *,
    headers: dict | None = None,
    params: dict | None = None,
    json=None,
    content: bytes | None = None,
    timeout_seconds: float = 30,
    max_bytes: int = 1_000_000,
    max_redirects: int = 5,
    follow_redirects: bool = True,
    secret_headers: tuple[str, ...] = (),
    allowlist: str = TOOLS,
) -> Fetched:
    """A guarded HTTP request. Redirects are followed here, one hop at a time, so every hop goes
    through the guard again; headers named in secret_headers never follow a redirect to
    another origin. With follow_redirects=False a 3xx is returned as it is. Raises
    OutboundBlocked, or httpx errors for transport failures."""
    if allowlist not in GUARDED:
        raise ValueError(f"{allowlist!r} is not one of the guard's allowlists")
    try:
        _check_url(httpx.URL(url))
    except httpx.InvalidURL as exc:
        raise OutboundBlocked(f"Not a valid URL: {str(url)[:200]!r} ({exc}).") from exc
    client = _client(allowlist)
    deadline = time.monotonic() + timeout_seconds
    try:
        request = client.build_request(
            method, url, headers=headers, params=params, json=json, content=content, timeout=timeout(timeout_seconds)
        )
    except (httpx.InvalidURL, httpx.LocalProtocolError) as exc:
        raise OutboundBlocked(f"The request cannot be sent as given ({exc}).") from exc
    for _ in range(max_redirects + 1):
        _check_url(request.url)
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the answer did not arrive in time", request=request)
        response = client.send(request, stream=True)
        next_request = response.next_request if follow_redirects else None
        if next_request is None:
            try:
                body, truncated = _read_limited(response, max_bytes, deadline)
            finally:
                response.close()
            return Fetched(response, body, truncated)
        response.close()
        if _origin(next_request.url) != _origin(request.url):
            for name in secret_headers:
                next_request.headers.pop(name, None)
        log.info("tool request redirected: %s -> %s", request.url, next_request.url)
        request = next_request
    raise OutboundBlocked(f"Stopped after {max_redirects} redirects starting at {url}.")


def mcp_http_client(*, headers: dict[str, str], timeout_seconds: float) -> httpx2.AsyncClient:
    """An httpx2 client (the MCP SDK's HTTP library) that connects through the same guard.

    The read timeout is long because a streamable-HTTP server may hold a response stream
    open; each tool call has its own deadline on top.
    """
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        network_backend=GuardedAsyncBackend(),
    )
    return httpx2.AsyncClient(
        transport=transport,
        headers=headers,
        follow_redirects=False,
        trust_env=False,
        timeout=httpx2.Timeout(timeout_seconds, read=300),
    )


def a2a_http_client(*, headers: dict[str, str], timeout_seconds: float) -> httpx.AsyncClient:
    """An async httpx client (the A2A SDK's HTTP library) that connects through the same guard,
    for remote agent tools (tools.remote_agents). No redirects: a JSON-RPC call is not one to follow."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        network_backend=GuardedHttpxAsyncBackend(),
    )
    return httpx.AsyncClient(
        transport=transport,
        headers=headers,
        follow_redirects=False,
        trust_env=False,
        timeout=httpx.Timeout(timeout_seconds, connect=min(10.0, timeout_seconds)),
    )
