"""Prints what the tool seams cost per call on this machine (no assertions).

    AGENTRY_OUTBOUND_ALLOWLIST=127.0.0.1 .venv/bin/python scripts/bench_tools.py

- HTTP: the guarded tool client (resolve, check, pinned connect, manual redirects) against
  the plain client the model providers use, both to a local server.
- MCP over stdio (mcp-server-time): a pooled session against a new session per call.
"""

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")

import django  # noqa: E402

django.setup()

from platform_site import outbound  # noqa: E402
from tests.support.servers import PetstoreServer  # noqa: E402
from tools.mcp_sessions import ServerConfig, SessionPool  # noqa: E402

N = 200


def per_call_ms(fn, n: int) -> tuple[float, float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), statistics.quantiles(samples, n=20)[-1]


def main() -> None:
    server = PetstoreServer()
    url = f"{server.base_url}/pets/1"
    plain = outbound.get_client()
    print(f"HTTP GET, {N} calls to a local server (median / p95 ms):")
    print("  provider client (unguarded)  %.2f / %.2f" % per_call_ms(lambda: plain.get(url), N))
    print("  tool client (guarded)        %.2f / %.2f" % per_call_ms(lambda: outbound.guarded_request("GET", url), N))
    server.stop()

    config = ServerConfig(
        id=1,
        name="time",
        transport="stdio",
        command=sys.executable,
        args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
        env=(),
        url="",
        headers=(),
        connect_timeout_seconds=20,
    )
    pool = SessionPool()

    def call(p):
        p.call_tool(config, "get_current_time", {"timezone": "Asia/Tokyo"}, timeout=10, rerunnable=True)

    start = time.perf_counter()
    call(pool)
    first = (time.perf_counter() - start) * 1000
    print("MCP stdio call (mcp-server-time), median / p95 ms:")
    print(f"  first call (starts the server)  {first:.1f}")
    print("  pooled session, %d calls        %.2f / %.2f" % ((N,) + per_call_ms(lambda: call(pool), N)))
    print("  new session per call, 5 calls   %.1f / %.1f" % per_call_ms(lambda: call(SessionPool()), 5))


if __name__ == "__main__":
    main()
