"""Writes for agents: pinning a run to an immutable snapshot of its agent's configuration."""

import uuid
from datetime import date
from decimal import Decimal

from django.db import IntegrityError, connection, transaction

from agents.models import USAGE_SHARDS, Agent, AgentUsageDay, AgentVersion
from agents.selectors import agent_config_state
from agents.snapshot import snapshot_build, snapshot_hash

# Per process: agent id -> (configuration state, the version built from it). Versions never
# change, so one stays current while the state and the agent's latest version stay the same.
_versions_by_state: dict[int, tuple[tuple, AgentVersion]] = {}


def agent_version_current(*, agent: Agent) -> AgentVersion:
    """The version matching the agent's configuration now, written if it is new.

    Building and hashing the snapshot takes milliseconds and every posted message asks, so the
    version found for a configuration state (agent_config_state, one read) is reused while the
    state is unchanged and the version is still the agent's latest."""
    # A model config held by the instance (perhaps edited, not saved) is what the build reads;
    # the state, read from the database, would not show it.
    keyed = not (Agent.model_config.is_cached(agent) or Agent.fallback_model_config.is_cached(agent))
    if keyed:
        state, latest_id = agent_config_state(agent=agent)
        known = _versions_by_state.get(agent.pk)
        if known is not None and known[0] == state and known[1].pk == latest_id:
            return known[1]
    snapshot = snapshot_build(agent=agent)
    digest = snapshot_hash(snapshot)
    # Playground versions (AgentVersion.playground) are never the draft, even with the same hash.
    version = AgentVersion.objects.filter(agent=agent, playground=False).order_by("-number").first()
    if version is None or version.config_hash != digest:
        try:
            with transaction.atomic():
                version = AgentVersion.objects.create(
                    agent=agent, number=(version.number + 1) if version else 1, config_hash=digest, snapshot=snapshot
                )
        except IntegrityError:
            # Another request wrote the same next number first; its snapshot is at least as new.
            return AgentVersion.objects.filter(agent=agent, playground=False).order_by("-number").first()
    # Kept only if the state did not move while the snapshot was read, so the build saw that
    # state (short of an edit and its exact undo both landing within those milliseconds).
    if keyed and agent_config_state(agent=agent)[0] == state:
        _versions_by_state[agent.pk] = (state, version)
    return version


def agent_usage_add(*, batch, agent_id: int, run_id, day: date, tokens: int, cost: Decimal) -> None:
    """Add one model call of run `run_id` to the agent's usage of `day`: a single upsert into the
    run's shard of the day (agents.models.USAGE_SHARDS), so concurrent runs of one agent never lose
    an increment nor all wait for one row (PostgreSQL and SQLite both speak ON CONFLICT). It is a
    write of `batch` (a conversations.batch.Batch, which the layers keep agents from importing):
    made with the model call it counts, and only if the batch's guard matched."""
    table = AgentUsageDay._meta.db_table
    # SELECT … WHERE rather than VALUES, so the guard can hold the row back (SQLite needs the WHERE
    # before ON CONFLICT anyway, to parse it).
    batch.add(
        "agent_usage",
        f'INSERT INTO "{table}" (agent_id, day, shard, total_tokens, cost, calls) '
        f"SELECT %s, %s, %s, %s, %s, 1 WHERE {{guard}} "
        f'ON CONFLICT (agent_id, day, shard) DO UPDATE SET total_tokens = "{table}".total_tokens + '
        f'excluded.total_tokens, cost = "{table}".cost + excluded.cost, calls = "{table}".calls + 1',
        [
            agent_id,
            connection.ops.adapt_datefield_value(day),
            uuid.UUID(str(run_id)).int % USAGE_SHARDS,
            tokens,
            connection.ops.adapt_decimalfield_value(cost, 16, 8),
        ],
    )
