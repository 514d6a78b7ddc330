"""Writes for agents: pinning a run to an immutable snapshot of its agent's configuration."""

import hashlib
import json
from datetime import date
from decimal import Decimal

from django.db import IntegrityError, connection, transaction

from agents.models import Agent, AgentTool, AgentUsageDay, AgentVersion, ModelConfig
from tools.approval_policy import effective_policy
from tools.models import ToolDefinition


def _decimal(value) -> str | None:
    """One spelling per amount ("1.0" typed in a form and "1.000000" read back are the same
    price), so an unchanged configuration always hashes to the same version."""
    return None if value is None else format(Decimal(str(value)).normalize(), "f")


def _float(value) -> float | None:
    # A form or a default may hold 10 where the database gives back 10.0: same value, other JSON.
    return None if value is None else float(value)


def _model_snapshot(config: ModelConfig | None) -> dict | None:
    if config is None:
        return None
    # The key itself stays on the ModelConfig row (encrypted); a snapshot never copies secrets.
    return {
        "id": config.pk, "name": config.name, "provider": config.provider, "base_url": config.base_url,
        "model": config.model, "temperature": _float(config.temperature), "top_p": _float(config.top_p),
        "max_tokens": config.max_tokens, "context_window": config.context_window,
        "frequency_penalty": _float(config.frequency_penalty),
        "presence_penalty": _float(config.presence_penalty), "seed": config.seed, "stop": config.stop,
        "response_format": config.response_format, "response_schema": config.response_schema,
        "thinking": config.thinking, "thinking_budget_tokens": config.thinking_budget_tokens,
        "reasoning_effort": config.reasoning_effort, "stream": config.stream,
        "extra_params": config.extra_params, "connect_timeout_seconds": _float(config.connect_timeout_seconds),
        "read_timeout_seconds": _float(config.read_timeout_seconds), "max_retries": config.max_retries,
        "price_input_per_million": _decimal(config.price_input_per_million),
        "price_output_per_million": _decimal(config.price_output_per_million),
        "price_cached_input_per_million": _decimal(config.price_cached_input_per_million),
    }


def _tool_snapshot(link: AgentTool) -> dict:
    tool = link.tool
    policy, rule = effective_policy(
        tool_policy=tool.approval_policy, tool_rule=tool.approval_rule, side_effect=tool.side_effect,
        override=link.approval, override_rule=link.approval_rule,
    )
    snapshot = {
        "id": tool.pk, "name": tool.name, "description": tool.description, "parameters": tool.parameters,
        "kind": tool.kind, "python_callable": tool.python_callable, "side_effect": tool.side_effect,
        "idempotent": tool.idempotent,
        "approval": {"policy": policy, "rule": rule, "timeout_seconds": tool.approval_timeout_seconds,
                     "on_expiry": tool.approval_on_expiry},
        "timeout_seconds": _float(tool.timeout_seconds), "max_result_chars": tool.max_result_chars,
    }
    # What the executors need to make the call; credentials stay on the rows (encrypted).
    if tool.kind == ToolDefinition.Kind.HTTP:
        snapshot["http"] = {
            "method": tool.http_method, "url": tool.http_url, "query_params": tool.http_query_params,
            "body_argument": tool.http_body_argument, "headers": tool.http_headers,
            "response_pointer": tool.http_response_pointer, "max_response_bytes": tool.http_max_response_bytes,
        }
    elif tool.kind == ToolDefinition.Kind.MCP:
        snapshot["mcp"] = {"server_id": tool.mcp_server_id, "tool_name": tool.mcp_tool_name}
    return snapshot


def agent_snapshot(*, agent: Agent) -> dict:
    links = (
        AgentTool.objects.filter(agent=agent, enabled=True, tool__is_active=True)
        .select_related("tool").order_by("tool__name")
    )
    return {
        "agent": {
            "id": agent.pk, "name": agent.name, "slug": agent.slug, "system_prompt": agent.system_prompt,
            "time_zone": agent.time_zone, "max_iterations": agent.max_iterations,
            "max_same_tool_streak": agent.max_same_tool_streak, "tool_choice": agent.tool_choice,
            "tool_choice_name": agent.tool_choice_name, "parallel_tool_calls": agent.parallel_tool_calls,
            "context_max_turns": agent.context_max_turns,
            "context_tool_result_max_chars": agent.context_tool_result_max_chars,
            "context_token_budget": agent.context_token_budget,
            "run_token_budget": agent.run_token_budget,
            "run_cost_budget": _decimal(agent.run_cost_budget),
            "run_timeout_seconds": agent.run_timeout_seconds,
            "daily_token_budget": agent.daily_token_budget,
            "daily_cost_budget": _decimal(agent.daily_cost_budget),
        },
        "model": _model_snapshot(agent.model_config),
        "fallback_model": _model_snapshot(agent.fallback_model_config),
        "tools": [_tool_snapshot(link) for link in links],
    }


def agent_version_current(*, agent: Agent) -> AgentVersion:
    """The version matching the agent's configuration now, written if it is new."""
    snapshot = agent_snapshot(agent=agent)
    digest = hashlib.sha256(json.dumps(snapshot, sort_keys=True, default=str).encode()).hexdigest()
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
