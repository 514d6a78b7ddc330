"""Writes for agents: pinning a run to an immutable snapshot of its agent's configuration."""

from datetime import date
from decimal import Decimal

from django.db import IntegrityError, connection, transaction

from agents.models import Agent, AgentUsageDay, AgentVersion
from agents.snapshot import snapshot_build, snapshot_hash


def agent_version_current(*, agent: Agent) -> AgentVersion:
    """The version matching the agent's configuration now, written if it is new."""
    snapshot = snapshot_build(agent=agent)
    digest = snapshot_hash(snapshot)
    latest = AgentVersion.objects.filter(agent=agent).order_by("-number").first()
    if latest is not None and latest.config_hash == digest:
        return latest
    try:
        with transaction.atomic():
            return AgentVersion.objects.create(
                agent=agent, number=(latest.number + 1) if latest else 1, config_hash=digest, snapshot=snapshot
            )
    except IntegrityError:
        # Another request wrote the same next number first; its snapshot is at least as new.
        return AgentVersion.objects.filter(agent=agent).order_by("-number").first()


def agent_usage_add(*, agent_id: int, day: date, tokens: int, cost: Decimal) -> None:
    """Add one model call to the agent's usage of `day`: a single upsert, so concurrent runs of
    one agent never lose an increment (PostgreSQL and SQLite both speak ON CONFLICT)."""
    table = AgentUsageDay._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{table}" (agent_id, day, total_tokens, cost, calls) VALUES (%s, %s, %s, %s, 1) '
            f'ON CONFLICT (agent_id, day) DO UPDATE SET total_tokens = "{table}".total_tokens + excluded.total_tokens, '
            f'cost = "{table}".cost + excluded.cost, calls = "{table}".calls + 1',
            [agent_id, day, tokens, connection.ops.adapt_decimalfield_value(cost, 16, 8)],
        )
