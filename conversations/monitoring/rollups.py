"""Rebuilding the hourly rollups from the ledger (run every 30 s by beat).

Each refresh recomputes whole hours from a window start to now: the last couple of hours
(model calls finish and runs end after their hour has begun), reaching further back when the
rollups fell behind (beat was down) and to the first ledger row on the very first refresh.
It reads the ledger through the indexes on LLMCall.started_at and Run.finished_at, so its cost
follows the number of recent rows, not the size of the ledger. Nothing is added to the
engine's hot path. An evaluation's runs (Run.sandbox set) are left out: the dashboard shows
production traffic.
"""

import math
import re
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Case, Count, F, FloatField, Max, Min, Q, Sum, Value, When
from django.db.models.functions import Cast, Floor, Greatest, Ln, TruncHour
from django.utils import timezone

from conversations.models import LLMCall, Run, RunStatus
from conversations.monitoring.histogram import LOG_BASE
from conversations.monitoring.models import ErrorHourly, LLMCallHourly, RollupState, RunHourly
from conversations.usage import USAGE_FIELDS

# Production traffic, what the dashboards and the alert rules (alerts.selectors) count: the runs
# of no evaluation and no fork (Run.sandbox empty), and their model calls. Calls outside a run
# (indexing embeddings) have no agent to count them under.
PRODUCTION_RUNS = Q(sandbox__isnull=True)
PRODUCTION_CALLS = Q(run__isnull=False, run__sandbox__isnull=True)

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_LONG_HEX = re.compile(r"\b[0-9a-f]{16,}\b", re.I)
_LONG_NUMBER = re.compile(r"\d{5,}")


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def error_summary(error: str) -> str:
    """One line that identical failures share: a traceback's last line (the exception), or the
    first line of a message, with ids and long numbers masked."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    line = _LONG_NUMBER.sub("N", _LONG_HEX.sub("<id>", _UUID.sub("<id>", line)))
    return line[:300]


def _window_start(now: datetime) -> datetime | None:
    recent = floor_hour(now) - timedelta(hours=settings.AGENTRY_MONITOR_ROLLUP_OVERLAP_HOURS)
    latest = max(
        filter(
            None, [LLMCallHourly.objects.aggregate(h=Max("hour"))["h"], RunHourly.objects.aggregate(h=Max("hour"))["h"]]
        ),
        default=None,
    )
    if latest is not None:
        return min(recent, latest)
    earliest = list(
        filter(
            None,
            [LLMCall.objects.aggregate(t=Min("started_at"))["t"], Run.objects.aggregate(t=Min("finished_at"))["t"]],
        )
    )
    return floor_hour(min(earliest)) if earliest else None


def _llm_call_rows(start: datetime) -> list[LLMCallHourly]:
    succeeded = Q(status=LLMCall.Status.SUCCEEDED, latency_ms__isnull=False)
    bucket = Case(
        When(succeeded, then=Floor(Ln(Greatest(Cast("latency_ms", FloatField()), Value(1.0))) / Value(LOG_BASE))),
        default=None,
        output_field=FloatField(),
    )
    groups = (
        LLMCall.objects.filter(PRODUCTION_CALLS, started_at__gte=start)
        .exclude(status=LLMCall.Status.STARTED)
        .annotate(hour=TruncHour("started_at", tzinfo=UTC), bucket=bucket)
        .values("hour", "model_config_id", "run__agent_id", "bucket")
        .annotate(
            calls=Count("id"),
            failed=Count("id", filter=Q(status=LLMCall.Status.FAILED)),
            cost=Sum("cost"),
            **{field: Sum(field) for field in USAGE_FIELDS},
        )
        .order_by()
    )
    rows: dict[tuple, LLMCallHourly] = {}
    for group in groups:
        key = (group["hour"], group["model_config_id"], group["run__agent_id"])
        row = rows.get(key)
        if row is None:
            row = rows[key] = LLMCallHourly(hour=key[0], model_config_id=key[1], agent_id=key[2], cost=0)
        row.calls += group["calls"]
        row.failed += group["failed"]
        row.cost += group["cost"] or 0
        for field in USAGE_FIELDS:
            setattr(row, field, getattr(row, field) + (group[field] or 0))
        if group["bucket"] is not None:
            bucket = str(int(group["bucket"]))
            row.latency_histogram[bucket] = row.latency_histogram.get(bucket, 0) + group["calls"]
    return list(rows.values())


def _run_rows(start: datetime) -> list[RunHourly]:
    groups = (
        Run.objects.filter(PRODUCTION_RUNS, finished_at__gte=start)
        .annotate(hour=TruncHour("finished_at", tzinfo=UTC))
        .values("hour", "agent_id", "status", "stop_reason")
        .annotate(runs=Count("id"))
        .order_by()
    )
    return [
        RunHourly(
            hour=g["hour"], agent_id=g["agent_id"], status=g["status"], stop_reason=g["stop_reason"], runs=g["runs"]
        )
        for g in groups
    ]


def _error_rows(start: datetime) -> list[ErrorHourly]:
    counts: dict[tuple, int] = {}
    sources = [
        (
            ErrorHourly.Source.RUN,
            Run.objects.filter(PRODUCTION_RUNS, finished_at__gte=start, status=RunStatus.FAILED).annotate(
                hour=TruncHour("finished_at", tzinfo=UTC), of_agent=F("agent_id")
            ),
        ),
        (
            ErrorHourly.Source.LLM_CALL,
            LLMCall.objects.filter(PRODUCTION_CALLS, started_at__gte=start, status=LLMCall.Status.FAILED).annotate(
                hour=TruncHour("started_at", tzinfo=UTC), of_agent=F("run__agent_id")
            ),
        ),
    ]
    for source, queryset in sources:
        for group in queryset.values("hour", "of_agent", "error").annotate(n=Count("id")).order_by():
            key = (group["hour"], group["of_agent"], source, error_summary(group["error"]))
            counts[key] = counts.get(key, 0) + group["n"]
    return [
        ErrorHourly(hour=hour, agent_id=agent_id, source=source, message=message, count=n)
        for (hour, agent_id, source, message), n in counts.items()
    ]


def rollups_refresh(*, since: datetime | None = None) -> dict:
    """Rebuild every hour from `since` (default: where the rollups need it) up to now."""
    clock = time.monotonic()
    now = timezone.now()
    start = floor_hour(since) if since else (_window_start(now) or floor_hour(now))
    llm_rows, run_rows, error_rows = _llm_call_rows(start), _run_rows(start), _error_rows(start)
    RollupState.objects.get_or_create(name="ledger", defaults={"refreshed_at": start, "window_start": start})
    with transaction.atomic():
        # Two refreshes at once (a long backfill overlapping the next beat) take turns here.
        RollupState.objects.select_for_update().get(name="ledger")
        for model, rows in ((LLMCallHourly, llm_rows), (RunHourly, run_rows), (ErrorHourly, error_rows)):
            model.objects.filter(hour__gte=start).delete()
            model.objects.bulk_create(rows, batch_size=1000)
        duration_ms = math.ceil((time.monotonic() - clock) * 1000)
        RollupState.objects.filter(name="ledger").update(refreshed_at=now, window_start=start, duration_ms=duration_ms)
    return {
        "window_start": start.isoformat(),
        "llm_call_rows": len(llm_rows),
        "run_rows": len(run_rows),
        "error_rows": len(error_rows),
        "duration_ms": duration_ms,
    }
