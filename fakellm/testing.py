"""Run the fake server in a background thread, for tests and benchmarks."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import uvicorn

from fakellm.app import create_app
from fakellm.loader import load_default_scripts


def serve_in_thread(
    scripts: dict[str, dict] | None = None, host: str = "127.0.0.1", port: int = 0
) -> tuple[str, Callable[[], None]]:
    """Start a server (default: the shipped scripts); return (base_url, stop)."""
    return serve_app_in_thread(create_app(load_default_scripts() if scripts is None else scripts), host, port)


def serve_app_in_thread(
    app, host: str = "127.0.0.1", port: int = 0, lifespan: str = "off"
) -> tuple[str, Callable[[], None]]:
    """Serve any ASGI app from a daemon thread; return (base_url, stop)."""
    # Binding here, not in uvicorn, is what lets port=0 report the chosen port.
    # The explicit IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on sockets
    # that declare it, and without it every response stalls ~40 ms (Nagle).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan=lifespan, timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"asgi-server:{bound_port}", daemon=True
    )
    thread.start()

    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("fakellm server did not start")
        time.sleep(0.01)
    with socket.create_connection((host, bound_port), timeout=5):
        pass

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)

    url_host = f"[{host}]" if ":" in host else host
    return f"http://{url_host}:{bound_port}", stop
