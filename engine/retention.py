"""The daily retention sweep: every agent's policy applied, then expired keys, and the rows of the
apps above (webhook deliveries) past their own retention."""

import logging

from django.conf import settings

from agents.models import Agent
from conversations.retention import event_records_expire, idempotency_keys_expire, runs_purge
from memory.services import memories_expire

log = logging.getLogger(__name__)


def idempotency_keys_sweep() -> int:
    """Clear idempotency keys older than AGENTRY_IDEMPOTENCY_KEY_HOURS. Beat runs this hourly,
    apart from the daily sweep, so a key stops matching within an hour of expiring."""
    return idempotency_keys_expire(hours=settings.AGENTRY_IDEMPOTENCY_KEY_HOURS)


def retention_sweep(*, dry_run: bool = False) -> dict:
    """Purge each agent's runs past its retention (tombstones record it), clear idempotency keys
    older than AGENTRY_IDEMPOTENCY_KEY_HOURS and let the apps above expire their own rows
    (notifications: finished webhook deliveries older than AGENTRY_WEBHOOK_DELIVERY_DAYS,
    counted as "webhook_deliveries" and "webhook_attempts"). A dry run changes nothing and
    reports what runs would go.

    Each batch commits on its own with its tombstone's counts, so a sweep stopped half-way (a
    task time limit on a first, large purge) loses nothing, and the next sweep goes on."""
    purges = {}
    for agent in Agent.objects.filter(retention_days__isnull=False).select_related("retention_set_by"):
        result = runs_purge(agent=agent, dry_run=dry_run)
        if result.counts["runs"]:
            purges[agent.slug] = {"cutoff": result.cutoff.isoformat(), **result.counts}
    summary = {"purged": purges}
    if not dry_run:
        summary["idempotency_keys_cleared"] = idempotency_keys_sweep()
        summary.update(event_records_expire())
        # Long-term memories past their agent's lifetime (each leaves an expire change row).
        summary["memories_expired"] = memories_expire()
    if purges or any(value for key, value in summary.items() if key != "purged"):
        log.info("retention sweep%s: %s", " (dry run)" if dry_run else "", summary)
    return summary
