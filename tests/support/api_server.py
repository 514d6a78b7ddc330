"""Real servers for end-to-end API tests: the ASGI app under uvicorn in a subprocess on the
test database, and a local HTTP receiver for webhooks."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from tests.support.workers import settings_module

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


class ApiServer:
    def __init__(self, *, database_url: str, env: dict | None = None, name: str = "web"):
        self.database_url = database_url
        self.extra_env = env or {}
        self.name = name
        self.process: subprocess.Popen | None = None
        self.base_url = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self, timeout: float = 30, *, ready_statuses=(200,)) -> "ApiServer":
        """Returns once /health/ answers one of `ready_statuses` (a 503 when a test took a
        dependency away on purpose)."""
        ARTIFACTS.mkdir(exist_ok=True)
        # Bound here and handed over as a file descriptor, so the port is known and never raced for.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        # The server loads the settings this process runs with (the test settings), not its default.
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings_module(),
            "DATABASE_URL": self.database_url,
            **self.extra_env,
        }
        log = open(ARTIFACTS / f"{self.name}.log", "wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "platform_site.asgi:application",
                "--fd",
                str(sock.fileno()),
                "--log-level",
                "warning",
                "--no-access-log",
                "--lifespan",
                "off",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=[sock.fileno()],
            start_new_session=True,
        )
        sock.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.base_url}/health/", timeout=20).status_code in ready_statuses:
                    return self
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"web server did not start; see {ARTIFACTS / (self.name + '.log')}")
            time.sleep(0.1)

    def threads(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class WebhookReceiver:
    """Answers each POST with the next scripted status (then 200) and records what it got."""

    def __init__(self):
        self.requests: list[dict] = []
        self.statuses: list[int] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.requests.append(
                        {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                    )
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps({"status": status}).encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
