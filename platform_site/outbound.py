"""The one seam for outbound HTTP.

Every call that leaves the process (LLM providers, HTTP tools) goes through this module, so
connection pooling, timeouts and logging are decided in one place. The client is shared per
process (httpx.Client is thread-safe) and rebuilt after a fork, because a pool inherited
from the parent would share its sockets.
"""

import logging
import os
import threading

import httpx

log = logging.getLogger(__name__)

_lock = threading.Lock()
_client: httpx.Client | None = None
_client_pid: int | None = None

# Generous pool: one worker process keeps many runs waiting on models at once.
_LIMITS = httpx.Limits(max_connections=500, max_keepalive_connections=200, keepalive_expiry=30)


def get_client() -> httpx.Client:
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        with _lock:
            if _client is None or _client_pid != os.getpid():
                _client = httpx.Client(limits=_LIMITS, follow_redirects=False, trust_env=False)
                _client_pid = os.getpid()
    return _client


def timeout(seconds: float, *, connect: float = 10.0) -> httpx.Timeout:
    return httpx.Timeout(seconds, connect=min(connect, seconds))
