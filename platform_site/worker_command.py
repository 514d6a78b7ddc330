"""The one spelling of the commands that start a Celery worker and the ASGI web server, for the
Python code that starts them (the test suite, the benchmark, the production smoke test).

scripts/dev.sh and docker-compose.yml write the same command out, because a shell script and
a compose file cannot call Python; they point here, so a change is made in all three places.
"""

import sys

# Every queue a task is routed to (CELERY_TASK_QUEUES in settings): a worker started here
# serves all of them unless told otherwise.
WORKER_QUEUES = ("llm", "maintenance")


def worker_argv(
    *,
    concurrency: int,
    pool: str = "threads",
    queues: tuple[str, ...] = WORKER_QUEUES,
    name: str | None = None,
    loglevel: str = "info",
    quiet: bool = True,
) -> list[str]:
    """The argv of a worker process run by this interpreter.

    Threads, because a task only hands its run to the process's engine loop and waits for it
    (engine.reactor): the concurrency is how many runs one process carries at once. `quiet`
    leaves out gossip, mingle and heartbeats, which a worker needs only to coordinate with other
    workers at startup and to be seen by monitoring."""
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "platform_site",
        "worker",
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-Q",
        ",".join(queues),
    ]
    if name is not None:
        argv += ["-n", name]
    if quiet:
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    return argv + ["-l", loglevel]


def web_argv(*, port: int, workers: int = 1, log_level: str = "warning") -> list[str]:
    """The argv of an ASGI web server on loopback run by this interpreter (no access log: the
    request log middleware writes one line per request already)."""
    argv = [sys.executable, "-m", "uvicorn", "platform_site.asgi:application", "--host", "127.0.0.1"]
    return argv + ["--port", str(port), "--workers", str(workers), "--log-level", log_level, "--no-access-log"]
