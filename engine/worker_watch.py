"""Noticing, while a command waits on runs, that no worker is there to take them.

A run waits in the queue until a worker takes it; with no worker the command that posted it
would otherwise wait out its whole timeout (ten minutes for an eval) and say nothing. Once runs
have stayed queued for NO_WORKER_AFTER_SECONDS, the watch pings the workers (Celery's remote
control, as the monitoring page does) and raises when none answers; a busy worker answers, so
runs that queue behind others are waited for as before.
"""

import time
from collections.abc import Callable

from platform_site.celery import app

NO_WORKER_AFTER_SECONDS = 15.0
PING_TIMEOUT_SECONDS = 1.0


class NoWorker(Exception):
    pass


def workers_answering() -> list[str]:
    """The names of the workers that answer a ping (an empty list when none does)."""
    replies = app.control.ping(timeout=PING_TIMEOUT_SECONDS) or []
    return sorted(name for reply in replies for name in reply)


class NoWorkerWatch:
    def __init__(self, *, ping: Callable[[], list[str]] = workers_answering, clock=time.monotonic):
        self.ping, self.clock = ping, clock
        self.queued_since: float | None = None
        self.next_ping = 0.0

    def check(self, *, queued: int) -> None:
        """Call on every poll with how many of the awaited runs are queued; raises NoWorker once
        they have been queued for NO_WORKER_AFTER_SECONDS and no worker answers a ping."""
        now = self.clock()
        if not queued:
            self.queued_since = None
            return
        if self.queued_since is None:
            self.queued_since = now
        waited = now - self.queued_since
        if waited < NO_WORKER_AFTER_SECONDS or now < self.next_ping:
            return
        self.next_ping = now + NO_WORKER_AFTER_SECONDS
        if not self.ping():
            raise NoWorker(
                f"No worker is taking the runs: {queued} still queued after {waited:.0f} s and no worker answers "
                "a ping. Start the stack (bash scripts/dev.sh) or a worker (.venv/bin/celery -A platform_site "
                "worker -P threads -c 8 -Q llm,maintenance); the queued runs start when it does."
            )
