"""Webhook deliveries leave with what they report, or once finished and old enough.

Registered by NotificationsConfig.ready with the ledger's purge (conversations.retention: a
purged run's events take their deliveries with them, and a webhook on a conversation keeps the
conversation), with its daily sweep (finished deliveries past AGENTRY_WEBHOOK_DELIVERY_DAYS), and
with forgetting an end user (memory.forget: a delivery's payload copies the run's answer).
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, QuerySet
from django.utils import timezone

from conversations.models import RunEvent
from conversations.retention import EXPIRY_BATCH_ROWS, EventRecords
from memory.forget import RunCopies
from notifications.models import Webhook, WebhookAttempt, WebhookDelivery


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _column(model, name: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def _execute(sql: str, params: list) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def deliveries_delete(*, events: str, params: list) -> dict[str, int]:
    """Delete the deliveries of the events `events` (a SELECT of their ids over `params`) with their
    attempts. Plain DELETE statements, as the purge's own: the ORM's would load every row first."""
    deliveries = f"SELECT {_column(WebhookDelivery, 'id')} FROM {_table(WebhookDelivery)} WHERE " + (
        f"{_column(WebhookDelivery, 'run_event')} IN ({events})"
    )
    return {
        "webhook_attempts": _execute(
            f"DELETE FROM {_table(WebhookAttempt)} WHERE {_column(WebhookAttempt, 'delivery')} IN ({deliveries})",
            params,
        ),
        "webhook_deliveries": _execute(
            f"DELETE FROM {_table(WebhookDelivery)} WHERE {_column(WebhookDelivery, 'run_event')} IN ({events})",
            params,
        ),
    }


def deliveries_count(*, events: QuerySet[RunEvent]) -> dict[str, int]:
    deliveries = WebhookDelivery.objects.filter(run_event__in=events.values("pk"))
    return {
        "webhook_attempts": WebhookAttempt.objects.filter(delivery__in=deliveries.values("pk")).count(),
        "webhook_deliveries": deliveries.count(),
    }


def deliveries_erase(*, run_ids) -> dict[str, int]:
    """Forgetting an end user: the deliveries of their runs' events go, with their attempts."""
    deliveries = WebhookDelivery.objects.filter(run_event__run_id__in=run_ids)
    return {
        "webhook_attempts_deleted": WebhookAttempt.objects.filter(delivery__in=deliveries.values("pk")).delete()[0],
        "webhook_deliveries_deleted": deliveries.delete()[0],
    }


def _finished_expire() -> dict[str, int]:
    return webhook_deliveries_expire(days=settings.AGENTRY_WEBHOOK_DELIVERY_DAYS)


def webhook_deliveries_expire(
    *, days: float, now: datetime | None = None, batch_size: int = EXPIRY_BATCH_ROWS
) -> dict[str, int]:
    """Delete finished (delivered or failed) webhook deliveries older than `days`, with their
    attempts. A pending one stays, whatever its age: it may still be sent."""
    cutoff = (now or timezone.now()) - timedelta(days=days)
    finished = WebhookDelivery.objects.filter(
        created_at__lt=cutoff, status__in=[WebhookDelivery.Status.DELIVERED, WebhookDelivery.Status.FAILED]
    )
    counts = {"webhook_deliveries": 0, "webhook_attempts": 0}
    while True:
        with transaction.atomic():
            ids = list(finished.select_for_update(skip_locked=True).values_list("pk", flat=True)[:batch_size])
            if not ids:
                return counts
            keys = [WebhookDelivery._meta.pk.get_db_prep_value(pk, connection) for pk in ids]
            marks = ", ".join(["%s"] * len(keys))
            counts["webhook_attempts"] += _execute(
                f"DELETE FROM {_table(WebhookAttempt)} WHERE {_column(WebhookAttempt, 'delivery')} IN ({marks})", keys
            )
            counts["webhook_deliveries"] += _execute(
                f"DELETE FROM {_table(WebhookDelivery)} WHERE {_column(WebhookDelivery, 'id')} IN ({marks})", keys
            )


RECORDS = EventRecords(
    kinds=("webhook_attempts", "webhook_deliveries"),
    delete=deliveries_delete,
    count=deliveries_count,
    keeps=lambda conversation: Exists(Webhook.objects.filter(conversation=conversation)),
    expire=_finished_expire,
)
# A delivery is a copy of its run's words, and no run is made from it.
COPIES = RunCopies(runs=lambda run_ids: set(), erase=deliveries_erase)
