"""A real Celery worker process for end-to-end tests, pointed at the test database."""

import os
import signal
import subprocess
import time
from pathlib import Path

from platform_site.worker_command import worker_argv

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


def settings_module() -> str:
    """The name of the settings this process runs with, for the processes it starts (pytest-django
    puts the test settings' name in the environment). Not settings.SETTINGS_MODULE: inside a
    test's settings override (the `settings` fixture) that is None."""
    return os.environ["DJANGO_SETTINGS_MODULE"]


class WorkerProcess:
    def __init__(self, *, database_url: str, env: dict | None = None, name: str = "worker"):
        self.database_url = database_url
        self.extra_env = env or {}
        self.name = name
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 60) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.starts += 1
        log_path = ARTIFACTS / f"{self.name}-{self.starts}.log"
        # The worker loads the settings this process runs with (the test settings), not its default.
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings_module(),
            "DATABASE_URL": self.database_url,
            "DB_CONN_MAX_AGE": "0",
            **self.extra_env,
        }
        log = open(log_path, "wb")
        self.process = subprocess.Popen(
            worker_argv(concurrency=8, name=f"{self.name}-{self.starts}@%h"),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while b" ready." not in log_path.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start; see {log_path}:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would: no cleanup, no acknowledgement."""
        if self.alive:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.alive:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
