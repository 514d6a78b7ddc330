"""Following a run's events as they are written, for SSE and the chat completions endpoint.

The rows are read from the database (events after a sequence number); between reads the
follower waits on a wake-up (conversations.wakeups) or its timed poll, holding no connection.
"""

import asyncio
from contextlib import aclosing

from django.conf import settings

from conversations.events import TERMINAL_EVENT_TYPES
from conversations.models import TERMINAL_STATUSES, Run, RunEvent
from conversations.wakeups import get_waker
from platform_site.asyncdb import db

BATCH_SIZE = 500


def _read(run_id, after: int) -> tuple[list[dict], bool]:
    # The status first: a run seen terminal here has all its events committed already.
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    rows = list(
        RunEvent.objects.filter(run_id=run_id, seq__gt=after)
        .order_by("seq")
        .values("seq", "type", "payload", "created_at")[:BATCH_SIZE]
    )
    return rows, status in TERMINAL_STATUSES


async def _batches(run_id, after: int, until: frozenset):
    loop = asyncio.get_running_loop()
    async with get_waker().watch(run_id) as wake:
        quiet_since = loop.time()
        while True:
            wake.clear()
            rows, terminal = await db(_read, run_id, after)
            for index, row in enumerate(rows):
                if row["type"] in until:
                    yield rows[: index + 1]
                    return
            if rows:
                after = rows[-1]["seq"]
                quiet_since = loop.time()
                yield rows
                if len(rows) == BATCH_SIZE:
                    continue
            elif terminal:
                return
            woken = await wake.wait()
            if not woken and loop.time() - quiet_since >= settings.AGENTRY_SSE_KEEPALIVE_SECONDS:
                quiet_since = loop.time()
                yield []


def run_event_batches(run_id, *, after: int = 0, until: frozenset = TERMINAL_EVENT_TYPES):
    """Lists of the run's events in order, from after `after`; an empty list after a quiet
    keepalive interval. Ends with the first event whose type is in `until`, or when a terminal
    run has nothing more to read. Use with `async with` (closes the wake-up subscription)."""
    return aclosing(_batches(run_id, after, until))
