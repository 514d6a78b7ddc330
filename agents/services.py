"""Writes for agents: pinning a run to an immutable snapshot of its agent's configuration."""

import hashlib
import json

from django.db import IntegrityError, transaction

from agents.models import Agent, AgentTool, AgentVersion, ModelConfig
from tools.approval_policy import effective_policy


def _model_snapshot(config: ModelConfig | None) -> dict | None:
    if config is None:
        return None
    # The key itself stays on the ModelConfig row (encrypted); a snapshot never copies secrets.
    return {
        "id": config.pk, "name": config.name, "provider": config.provider, "base_url": config.base_url,
        "model": config.model, "temperature": config.temperature, "top_p": config.top_p,
        "max_tokens": config.max_tokens, "frequency_penalty": config.frequency_penalty,
        "presence_penalty": config.presence_penalty, "stream": config.stream,
        "extra_params": config.extra_params, "connect_timeout_seconds": config.connect_timeout_seconds,
        "read_timeout_seconds": config.read_timeout_seconds, "max_retries": config.max_retries,
        "price_input_per_million": str(config.price_input_per_million),
        "price_output_per_million": str(config.price_output_per_million),
        "price_cached_input_per_million": str(config.price_cached_input_per_million),
    }


def _tool_snapshot(link: AgentTool) -> dict:
    tool = link.tool
    policy, rule = effective_policy(
        tool_policy=tool.approval_policy, tool_rule=tool.approval_rule, side_effect=tool.side_effect,
        override=link.approval, override_rule=link.approval_rule,
    )
    return {
        "id": tool.pk, "name": tool.name, "description": tool.description, "parameters": tool.parameters,
        "kind": tool.kind, "python_callable": tool.python_callable, "side_effect": tool.side_effect,
        "idempotent": tool.idempotent,
        "approval": {"policy": policy, "rule": rule, "timeout_seconds": tool.approval_timeout_seconds,
                     "on_expiry": tool.approval_on_expiry},
        "timeout_seconds": tool.timeout_seconds, "max_result_chars": tool.max_result_chars,
    }


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
            "parallel_tool_calls": agent.parallel_tool_calls,
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
