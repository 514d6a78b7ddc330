"""A workspace's usage against its budgets and quotas (workspaces.models.Workspace: tokens and
cost per day and per month, runs in flight), read for admission (engine.admission_limits), the
usage page (console.workspace_usage) and Prometheus (console.metrics).

A workspace's day and month are those of the installation's time zone (settings.TIME_ZONE). Its
usage is the sum of its agents' daily usage (agents.models.AgentUsageDay, whose rows are dated in
each agent's own time zone): for an agent in another zone, the day it adds is its own, shifted
from the workspace's by the zones' offset. Runs in flight are its agents' runs not yet ended."""

import zoneinfo
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connection
from django.db.models import Count, FilteredRelation, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from agents.models import Agent, AgentUsageDay
from conversations.models import TERMINAL_STATUSES, Run, RunStatus
from workspaces.models import Workspace

# Listed, not "NOT IN (terminal)": the runs' (status, id) index finds the few open ones.
IN_FLIGHT_STATUSES = tuple(status for status in RunStatus if status not in TERMINAL_STATUSES)
LIMIT_FIELDS = (
    "daily_token_limit",
    "monthly_token_limit",
    "daily_cost_limit",
    "monthly_cost_limit",
    "max_runs_in_flight",
)


def workspace_has_limits(workspace: Workspace) -> bool:
    return any(getattr(workspace, name) is not None for name in LIMIT_FIELDS)


@dataclass(frozen=True)
class Period:
    """Today and this month in the installation's time zone, and when each ends."""

    today: date
    month_start: date
    day_end: datetime
    month_end: datetime
    time_zone: str

    @classmethod
    def at(cls, now: datetime) -> "Period":
        zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)
        today = now.astimezone(zone).date()
        month_start = today.replace(day=1)
        next_month = (month_start + timedelta(days=32)).replace(day=1)
        tomorrow = today + timedelta(days=1)
        return cls(
            today=today,
            month_start=month_start,
            day_end=datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=zone),
            month_end=datetime(next_month.year, next_month.month, next_month.day, tzinfo=zone),
            time_zone=settings.TIME_ZONE,
        )


@dataclass
class Usage:
    tokens_today: int = 0
    cost_today: Decimal = Decimal(0)
    tokens_month: int = 0
    cost_month: Decimal = Decimal(0)
    runs_in_flight: int = 0
    slug: str = ""
    # The workspace's limits, as read with the usage (LIMIT_FIELDS; None: no limit).
    limits: dict = field(default_factory=dict)


def _decimal(value) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value or 0))


def workspaces_usage(*, period: Period, workspace_id: int | None = None) -> dict[int, Usage]:
    """Each workspace's usage in `period` with its limits (only `workspace_id`'s if given), in one
    statement: admission's check reads one workspace with it, Prometheus every workspace. The
    usage rows are joined only for this month's days, through their (agent, day, shard) index."""
    workspaces, agents, days, runs = (m._meta.db_table for m in (Workspace, Agent, AgentUsageDay, Run))
    statuses = ", ".join(["%s"] * len(IN_FLIGHT_STATUSES))
    limits = ", ".join(f'w."{name}"' for name in LIMIT_FIELDS)
    day = connection.ops.adapt_datefield_value
    where = 'WHERE w."id" = %s ' if workspace_id is not None else ""
    sql = (
        f'SELECT w."id", w."slug", {limits}, '
        f'COALESCE(SUM(CASE WHEN u."day" = %s THEN u."total_tokens" END), 0), '
        f'COALESCE(SUM(CASE WHEN u."day" = %s THEN u."cost" END), 0), '
        f'COALESCE(SUM(u."total_tokens"), 0), COALESCE(SUM(u."cost"), 0), '
        f'(SELECT COUNT(*) FROM "{runs}" r JOIN "{agents}" ra ON ra."id" = r."agent_id" '
        f'WHERE ra."workspace_id" = w."id" AND r."status" IN ({statuses})) '
        f'FROM "{workspaces}" w LEFT JOIN "{agents}" a ON a."workspace_id" = w."id" '
        f'LEFT JOIN "{days}" u ON u."agent_id" = a."id" AND u."day" >= %s AND u."day" <= %s '
        f'{where}GROUP BY w."id" ORDER BY w."slug"'
    )
    params = [day(period.today), day(period.today), *IN_FLIGHT_STATUSES, day(period.month_start), day(period.today)]
    if workspace_id is not None:
        params.append(workspace_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    found = {}
    count = len(LIMIT_FIELDS)
    for row in rows:
        tokens_today, cost_today, tokens_month, cost_month, in_flight = row[2 + count :]
        found[row[0]] = Usage(
            tokens_today=int(tokens_today),
            cost_today=_decimal(cost_today),
            tokens_month=int(tokens_month),
            cost_month=_decimal(cost_month),
            runs_in_flight=int(in_flight),
            slug=row[1],
            limits={
                name: (_decimal(value) if value is not None and "cost" in name else value)
                for name, value in zip(LIMIT_FIELDS, row[2 : 2 + count])
            },
        )
    return found


def workspace_agents_usage(*, workspace_id: int, period: Period) -> QuerySet[Agent]:
    """The workspace's agents (by name) with their usage in `period`: tokens_today, cost_today,
    tokens_month, cost_month and runs_in_flight. One statement however many agents."""
    # Joined on this month's days only (the join's ON, not a filter of every day ever).
    month = FilteredRelation(
        "usage_days", condition=Q(usage_days__day__gte=period.month_start, usage_days__day__lte=period.today)
    )
    today = Q(month__day=period.today)
    in_flight = (
        Run.objects.filter(agent_id=OuterRef("pk"), status__in=IN_FLIGHT_STATUSES)
        .order_by()
        .values("agent_id")
        .annotate(n=Count("*"))
        .values("n")
    )
    return (
        Agent.objects.filter(workspace_id=workspace_id)
        .only("id", "name", "slug", "is_active")
        .alias(month=month)
        .annotate(
            tokens_today=Coalesce(Sum("month__total_tokens", filter=today), 0),
            cost_today=Coalesce(Sum("month__cost", filter=today), Value(Decimal(0))),
            tokens_month=Coalesce(Sum("month__total_tokens"), 0),
            cost_month=Coalesce(Sum("month__cost"), Value(Decimal(0))),
            runs_in_flight=Coalesce(Subquery(in_flight, output_field=IntegerField()), 0),
        )
        .order_by("name", "id")
    )
