"""What the standalone reliability scripts share: the PostgreSQL + Redis stack named by the
environment (migrated, never SQLite; the broker Redis or RabbitMQ), free loopback ports, and a
bounded wait for runs."""

import os
import socket
import statistics
import sys
import time


def stack_prepare(*, script: str, env: dict[str, str]) -> None:
    """Check the environment, apply the script's defaults (the workers it starts inherit them;
    the caller's own values win) and set Django up on a migrated database."""
    database = os.environ.get("DATABASE_URL", "")
    if not database.startswith(("postgres://", "postgresql://")):
        sys.exit(
            f"{script} needs PostgreSQL and Redis, as production has: set DATABASE_URL=postgres://… and "
            "REDIS_URL=redis://… (SQLite cannot hold several worker processes writing at once)."
        )
    if not os.environ.get("REDIS_URL", "").startswith("redis://"):
        sys.exit(
            f"{script} needs Redis (the cache, and the broker unless CELERY_BROKER_URL names one): set REDIS_URL=redis://…"
        )
    # The broker follows REDIS_URL unless CELERY_BROKER_URL names RabbitMQ (or another Redis).
    if not (os.environ.get("CELERY_BROKER_URL") or "redis://").startswith(("redis://", "amqp://")):
        sys.exit(f"{script} needs a Redis or RabbitMQ broker: set CELERY_BROKER_URL=amqp://… or leave it unset")
    for name, value in env.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_runs(run_ids: list) -> int:
    from conversations.models import TERMINAL_STATUSES, Run

    return Run.objects.filter(pk__in=run_ids).exclude(status__in=TERMINAL_STATUSES).count()


def run_durations(run_ids: list) -> str:
    """Median, 95th percentile and longest time from post to terminal state."""
    from conversations.models import Run

    spans = sorted(
        (finished - created).total_seconds()
        for created, finished in Run.objects.filter(pk__in=run_ids, finished_at__isnull=False).values_list(
            "created_at", "finished_at"
        )
    )
    if not spans:
        return "no run finished"
    p95 = spans[min(len(spans) - 1, int(len(spans) * 0.95))]
    return f"median {statistics.median(spans):.2f} s, p95 {p95:.2f} s, max {spans[-1]:.2f} s"


class Clock:
    """Wall time since the script started, for the timings it prints."""

    def __init__(self):
        self.started = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.started
