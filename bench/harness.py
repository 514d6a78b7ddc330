"""Processes for the benchmarks: the fake model server, Celery workers and the web server,
each a real process on this machine, plus machine-wide CPU accounting from /proc."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from platform_site.worker_command import web_argv, worker_argv

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "var" / "bench"


def _spawn(name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
    LOGS.mkdir(parents=True, exist_ok=True)
    log = open(LOGS / f"{name}.log", "wb")
    return subprocess.Popen(
        args, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not come up")
        time.sleep(0.1)


def start_fakellm(port: int) -> subprocess.Popen:
    process = _spawn("fakellm", [sys.executable, "-m", "fakellm", "--host", "127.0.0.1", "--port", str(port)])
    wait_http(f"http://127.0.0.1:{port}/_health")
    return process


def start_counting_service(port: int, delay_ms: int = 0) -> subprocess.Popen:
    process = _spawn(
        "counting",
        [
            sys.executable,
            "-m",
            "bench.counting_service",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--delay-ms",
            str(delay_ms),
        ],
    )
    wait_http(f"http://127.0.0.1:{port}/writes")
    return process


def start_worker(name: str, *, concurrency: int, pool: str = "threads", env: dict | None = None) -> subprocess.Popen:
    process = _spawn(name, worker_argv(concurrency=concurrency, pool=pool, name=f"{name}@%h", loglevel="warning"), env)
    time.sleep(0.5)
    return process


def start_web(port: int, env: dict | None = None, workers: int = 1) -> subprocess.Popen:
    process = _spawn(
        "web",
        # Info: uvicorn says there when its health check replaces a worker (a dropped connection).
        web_argv(port=port, workers=workers, log_level="info"),
        env,
    )
    wait_http(f"http://127.0.0.1:{port}/health/")
    return process


def machine_cpu_seconds() -> float:
    """Busy CPU time of the whole machine (all processes: web, workers, broker, database)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """CPU time of one process and its reaped children."""
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(v) for v in parts[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                kids.append(int(entry.name))
    return kids


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and all its live descendants (uvicorn's and Celery's children)."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            total += process_cpu_seconds(current)
        except OSError:
            continue
        pending += _children(current)
    return total


def named_cpu_seconds(*names: str) -> float:
    """CPU time of every process whose command name is one of `names` (PostgreSQL backends, Redis)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in names:
                    total += process_cpu_seconds(int(entry.name))
            except OSError:
                continue
    return total
