"""The lease fence on a run's writes: the exception a stale holder gets, and a fresh deadline.

The ledger's own event append checks and extends the lease in the same statement, so these two
live with the record; claiming and renewing leases is the engine's (engine.leases).
"""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone


class LeaseLost(Exception):
    """Another worker took the run over (ours lapsed); stop touching it."""


def lease_deadline():
    return timezone.now() + timedelta(seconds=settings.AGENTRY_RUN_LEASE_SECONDS)
