"""Leases: which worker holds a run, until when.

A worker claims a run with a conditional UPDATE (only a queued run, or a running one whose
lease lapsed, can be claimed; engine.transitions), so two workers can never both hold it. One thread per worker
process renews the leases of every run the process holds with a single UPDATE, however many
runs wait on their models at once.
"""

import logging
import os
import socket
import threading
import uuid

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from conversations import events
from conversations.fencing import LeaseLost, lease_deadline
from conversations.models import Message, Run, RunStatus
from engine.transitions import Shape, run_transition

log = logging.getLogger(__name__)


_owner: tuple[int, str] | None = None


def process_owner() -> str:
    global _owner
    if _owner is None or _owner[0] != os.getpid():
        _owner = (os.getpid(), f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    return _owner[1]


# A run waiting its turn in its conversation has no message yet: it is admitted (given its user
# message) only when no earlier run of the conversation is active any more. A running run can be
# claimed only once its lease lapsed.
_CLAIM = Shape(
    "claim",
    where=lambda now: (
        (Q(status=RunStatus.QUEUED) | Q(lease_expires_at__lt=now))
        & Exists(Message.objects.filter(run_id=OuterRef("pk")))
    ),
    fields=lambda now: {"claims": F("claims") + 1, "started_at": Coalesce("started_at", now)},
)


def _claim(owner: str) -> dict:
    return {
        "to": RunStatus.RUNNING,
        "expect": (RunStatus.QUEUED, RunStatus.RUNNING),
        "owner": owner,
        "shape": _CLAIM,
        "values": {"now": timezone.now()},
        "payload": events.run_running(worker=owner),
    }


def run_claim(*, run_id, owner: str) -> bool:
    """Take the run (queued, or running on a lapsed lease), with its run.running event.

    Asynchronously (conversations.batch): the first step's attempt commits synchronously before
    its request, and a claim a database crash undoes leaves the run as it was."""
    return run_transition(run_id=run_id, asynchronous_commit=True, **_claim(owner))


def lease_fence(*, run_id, owner: str) -> None:
    """Inside a step's transaction: extend our lease or abort the step if we lost it."""
    updated = Run.objects.filter(pk=run_id, lease_owner=owner, status=RunStatus.RUNNING).update(
        lease_expires_at=lease_deadline()
    )
    if not updated:
        raise LeaseLost(str(run_id))


class LeaseRenewer:
    def __init__(self):
        self._held: set = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def hold(self, run_id) -> None:
        with self._lock:
            self._held.add(run_id)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._loop, name="lease-renewer", daemon=True)
                self._thread.start()

    def release(self, run_id) -> None:
        with self._lock:
            self._held.discard(run_id)

    def _loop(self) -> None:
        interval = max(0.5, settings.AGENTRY_RUN_LEASE_SECONDS / 3)
        stop = threading.Event()
        while not stop.wait(interval):
            # The update runs under the lock: once release() returns, the run is never renewed
            # again by this process, so a crashed step's lease lapses on time.
            with self._lock:
                held = list(self._held)
                if not held:
                    continue
                try:
                    _renew(held)
                except Exception:  # the database may blink; the next round tries again
                    log.warning("lease renewal failed", exc_info=True)
                    close_old_connections()
                finally:
                    connection.close()


def _renew(held: list) -> None:
    """Extend the leases of the runs this process holds.

    A run whose row is locked is in the middle of a step, and that step's commit extends its
    lease (conversations.fencing): it is skipped rather than waited for. Waiting would hold the
    renewer's lock, and the engine loop that carries the step (engine.reactor) must never wait
    on a thread that waits on that loop's own transactions."""
    ours = Run.objects.filter(pk__in=held, lease_owner=process_owner(), status=RunStatus.RUNNING)
    if not connection.features.has_select_for_update_skip_locked:  # SQLite: no row locks to wait on
        ours.update(lease_expires_at=lease_deadline())
        return
    with transaction.atomic():
        free = list(ours.select_for_update(skip_locked=True).values_list("pk", flat=True))
        if free:
            Run.objects.filter(pk__in=free).update(lease_expires_at=lease_deadline())


renewer = LeaseRenewer()
