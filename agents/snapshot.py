"""The agent-version snapshot: what a run is pinned to, as typed structures.

An AgentVersion stores the agent's settings, its model configs and its tools' specs as JSON,
identified by the hash of that JSON. The structures below are that JSON exactly (TypedDicts, so
a snapshot travels as the plain dict the executors in `tools` and the provider adapters read,
with no conversion on the hot path), `snapshot_build` is the one place that writes it, and
`snapshot_parse` the one place that reads a stored one: code that reads a snapshot takes it
from there as an AgentSnapshot, so a type checker knows every key it reads, and uses the helpers
here (`snapshot_models`, `snapshot_tool`) rather than walking the JSON itself.
"""

import hashlib
import json
from collections.abc import Iterable
from decimal import Decimal
from typing import Literal, NotRequired, TypedDict, cast

from agents.delegation import DELEGATE_PARAMETERS
from agents.guardrails import (
    KIND_MODERATION,
    KIND_PATTERN,
    KIND_TERMS,
    GuardrailSpec,
    GuardrailsSnapshot,
    terms_parse,
)
from agents.models import (
    MEMORY_KINDS,
    Agent,
    AgentDelegate,
    AgentTool,
    GuardrailRule,
    ModelConfig,
    ModelPurpose,
    RoutingRule,
    routing_values,
)
from agents.providers.caching import AUTO as CACHING_AUTO
from tools.approval_policy import ApprovalExpiry, ApprovalPolicy, effective_policy
from tools.models import ToolDefinition


class AgentSettings(TypedDict):
    id: int
    name: str
    slug: str
    system_prompt: str
    time_zone: str
    # What the engine's own messages to the user are written in (engine.speech); absent from
    # versions pinned before agents had a language.
    language: NotRequired[str]
    max_iterations: int
    max_same_tool_streak: int
    tool_choice: str
    tool_choice_name: str
    parallel_tool_calls: bool
    context_max_turns: int | None
    context_tool_result_max_chars: int | None
    context_token_budget: int | None
    run_token_budget: int | None
    run_cost_budget: str | None  # a Decimal's text: one spelling per amount (see _decimal)
    run_timeout_seconds: int | None
    daily_token_budget: int | None
    daily_cost_budget: str | None
    # Answers in a schema (agents.output_schema): only for an agent that declares one, so the
    # others pin the same snapshot (and hash) as before; absent reads as none (snapshot_output).
    output_schema: NotRequired[dict]
    output_repair_turns: NotRequired[int]


class ModelSnapshot(TypedDict):
    """A ModelConfig without its key: the key stays on the row, encrypted."""

    id: int
    name: str
    provider: str
    base_url: str
    model: str
    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    context_window: int
    frequency_penalty: float | None
    presence_penalty: float | None
    seed: int | None
    stop: list[str] | None
    response_format: str
    response_schema: dict | None
    thinking: str
    thinking_budget_tokens: int | None
    reasoning_effort: str
    stream: bool
    extra_params: dict | None
    connect_timeout_seconds: float | None
    read_timeout_seconds: float | None
    max_retries: int
    price_input_per_million: str | None
    price_output_per_million: str | None
    price_cached_input_per_million: str | None
    # Only for configs that can hold an answer to a JSON Schema, so the others pin the same
    # snapshot (and hash) as before the setting existed.
    structured_output: NotRequired[bool]
    # Only for configs that take more than text (agents.models.INPUT_KINDS), for the same reason.
    input_kinds: NotRequired[list[str]]
    # Only for configs that price audio apart from input, for the same reason.
    price_audio_input_per_million: NotRequired[str]
    # Only for configs whose prompt caching is not "auto" (agents.models.PromptCaching), and that
    # price cache writes apart from input, for the same reason.
    prompt_caching: NotRequired[str]
    price_cache_write_per_million: NotRequired[str]
    # Only for a transcription config (agents.models.ModelPurpose), with its price of a minute of
    # audio when it has one, for the same reason.
    purpose: NotRequired[str]
    price_audio_per_minute: NotRequired[str]


class ToolApproval(TypedDict):
    policy: str
    rule: str
    timeout_seconds: int | None
    on_expiry: str


class ToolHttp(TypedDict):
    method: str
    url: str
    query_params: list
    body_argument: str
    headers: dict
    response_pointer: str
    max_response_bytes: int


class ToolMcp(TypedDict):
    server_id: int
    tool_name: str


class ToolDelegate(TypedDict):
    """The agent a delegate tool hands its task to (engine.delegation starts its run)."""

    agent_id: int
    agent_slug: str
    delegate_id: int


class ToolA2A(TypedDict):
    """A remote agent: its card (fetched and cached on the tool's row) and the skill used."""

    card_url: str
    skill: str


# The kind of a tool that is another agent: no executor runs it, the engine starts a child run.
DELEGATE_KIND = "agent"


class ToolSpec(TypedDict):
    """A tool as the agent may call it: what the model is shown, and what the executors need."""

    id: int | None  # None for a delegate: it is an agent, not a ToolDefinition
    name: str
    description: str
    parameters: dict
    kind: str
    python_callable: str
    side_effect: Literal["read", "write"]
    idempotent: bool
    approval: ToolApproval
    timeout_seconds: float | None
    max_result_chars: int
    http: NotRequired[ToolHttp]  # kind "http" only
    mcp: NotRequired[ToolMcp]  # kind "mcp" only
    a2a: NotRequired[ToolA2A]  # kind "a2a" only
    delegate: NotRequired[ToolDelegate]  # kind DELEGATE_KIND only


class MemorySnapshot(TypedDict):
    """Long-term memory (the memory app): where it is kept and what a run does with it."""

    space: str  # a shared space's name; empty: the agent's own (memory.services.memory_scope)
    kinds: list[str]  # the kinds kept, never empty (an agent that names none keeps every kind)
    shown: int  # how many memories a run is shown at its first step
    ttl_days: int | None  # days a memory lives unless used or confirmed; None: until removed
    # The model whose vectors find memories by meaning (memory.services); only agents that name
    # one have the key, so their memory settings pin the same snapshot as before it existed.
    embedding_model: NotRequired[ModelSnapshot]
    # Tokens the agent's extractions may use per day (engine.memory); only when capped, for the
    # same reason as embedding_model.
    daily_tokens: NotRequired[int]


class ConversionsSnapshot(TypedDict):
    """What becomes of a part the agent's models do not take (engine.part_conversion): per kind
    ("audio", "image", "file") the conversion ("transcribe", "ocr", "describe", "extract"); a
    kind absent is refused when posted. The model a conversion needs comes with it."""

    kinds: dict[str, str]
    transcription_model: NotRequired[ModelSnapshot]
    description_model: NotRequired[ModelSnapshot]


class RoutingRuleSpec(TypedDict):
    """A routing rule as a run reads it (engine.routing): its condition's settings, only those
    of its kind, and the model it picks."""

    id: int
    name: str
    condition: str
    model: ModelSnapshot
    length_unit: NotRequired[str]  # input_length: "chars" or "tokens"
    length_over: NotRequired[int | None]
    length_under: NotRequired[int | None]
    attachment_kind: NotRequired[str]  # attachments: "any", "image", "audio", "file"
    tiers: NotRequired[list[str]]  # tier: lower-cased
    time_start: NotRequired[str]  # time_of_day: "HH:MM:SS", in time_zone ("" the agent's)
    time_end: NotRequired[str]
    time_zone: NotRequired[str]
    classifier_model: NotRequired[ModelSnapshot]  # classifier
    classifier_prompt: NotRequired[str]
    labels: NotRequired[list[str]]  # lower-cased


class RoutingSnapshot(TypedDict):
    rules: list[RoutingRuleSpec]


class AgentSnapshot(TypedDict):
    agent: AgentSettings
    model: ModelSnapshot
    fallback_model: ModelSnapshot | None
    tools: list[ToolSpec]
    # Only agents with enabled guardrail rules have the key, so an agent without any pins the
    # same snapshot (and hash) as before guardrails existed, and the engine skips them by a lookup.
    guardrails: NotRequired[GuardrailsSnapshot]
    # Only agents with memory on have the key, for the same reason as "guardrails".
    memory: NotRequired[MemorySnapshot]
    # Only agents that turn some part into text have the key, for the same reason.
    conversions: NotRequired[ConversionsSnapshot]
    # Only agents with enabled routing rules have the key, for the same reason (engine.routing).
    routing: NotRequired[RoutingSnapshot]


class SnapshotInvalid(ValueError):
    """A stored snapshot does not have the shape this code reads."""


def snapshot_parse(data: dict) -> AgentSnapshot:
    """A stored snapshot as an AgentSnapshot, checked for the parts every reader relies on.

    The check is by keys, not a copy: the dict is handed on as it is (the engine reads it on
    every step)."""
    if not isinstance(data, dict):
        raise SnapshotInvalid(f"a snapshot is an object, not {type(data).__name__}")
    missing = [key for key in AgentSnapshot.__required_keys__ if key not in data]
    if missing:
        raise SnapshotInvalid(f"snapshot lacks {', '.join(sorted(missing))}")
    if not isinstance(data["agent"], dict) or not isinstance(data["model"], dict):
        raise SnapshotInvalid("snapshot's agent and model must be objects")
    if not isinstance(data["tools"], list):
        raise SnapshotInvalid("snapshot's tools must be a list")
    return cast(AgentSnapshot, data)


def snapshot_models(snapshot: AgentSnapshot) -> list[ModelSnapshot]:
    """The models a call may use, in the order they are tried: the agent's, then its fallback."""
    fallback = snapshot["fallback_model"]
    return [snapshot["model"]] if fallback is None else [snapshot["model"], fallback]


def snapshot_tools(snapshot: AgentSnapshot) -> dict[str, ToolSpec]:
    """The agent's tools by name."""
    return {tool["name"]: tool for tool in snapshot["tools"]}


def snapshot_tool(snapshot: AgentSnapshot, name: str) -> ToolSpec | None:
    """The spec of the tool the agent lists under `name`; None if it lists no such tool."""
    return next((tool for tool in snapshot["tools"] if tool["name"] == name), None)


def snapshot_hash(snapshot: AgentSnapshot) -> str:
    """What identifies a version: equal configurations hash equal, whatever order keys came in."""
    return hashlib.sha256(json.dumps(snapshot, sort_keys=True, default=str).encode()).hexdigest()


def _decimal(value) -> str | None:
    """One spelling per amount ("1.0" typed in a form and "1.000000" read back are the same
    price), so an unchanged configuration always hashes to the same version."""
    return None if value is None else format(Decimal(str(value)).normalize(), "f")


def _float(value) -> float | None:
    # A form or a default may hold 10 where the database gives back 10.0: same value, other JSON.
    return None if value is None else float(value)


def _model_snapshot(config: ModelConfig) -> ModelSnapshot:
    model: ModelSnapshot = {
        "id": config.pk,
        "name": config.name,
        "provider": config.provider,
        "base_url": config.base_url,
        "model": config.model,
        "temperature": _float(config.temperature),
        "top_p": _float(config.top_p),
        "max_tokens": config.max_tokens,
        "context_window": config.context_window,
        "frequency_penalty": _float(config.frequency_penalty),
        "presence_penalty": _float(config.presence_penalty),
        "seed": config.seed,
        "stop": config.stop,
        "response_format": config.response_format,
        "response_schema": config.response_schema,
        "thinking": config.thinking,
        "thinking_budget_tokens": config.thinking_budget_tokens,
        "reasoning_effort": config.reasoning_effort,
        "stream": config.stream,
        "extra_params": config.extra_params,
        "connect_timeout_seconds": _float(config.connect_timeout_seconds),
        "read_timeout_seconds": _float(config.read_timeout_seconds),
        "max_retries": config.max_retries,
        "price_input_per_million": _decimal(config.price_input_per_million),
        "price_output_per_million": _decimal(config.price_output_per_million),
        "price_cached_input_per_million": _decimal(config.price_cached_input_per_million),
    }
    if config.structured_output:
        model["structured_output"] = True
    if config.input_kinds and list(config.input_kinds) != ["text"]:
        model["input_kinds"] = list(config.input_kinds)
    if config.price_audio_input_per_million:
        model["price_audio_input_per_million"] = _decimal(config.price_audio_input_per_million)
    if config.prompt_caching != CACHING_AUTO:
        model["prompt_caching"] = config.prompt_caching
    if config.price_cache_write_per_million:
        model["price_cache_write_per_million"] = _decimal(config.price_cache_write_per_million)
    if config.purpose != ModelPurpose.CHAT:
        model["purpose"] = config.purpose
    if config.price_audio_per_minute:
        model["price_audio_per_minute"] = _decimal(config.price_audio_per_minute)
    return model


def model_input_kinds(model: ModelSnapshot) -> list[str]:
    """What a snapshot's model takes in a message (text only for snapshots pinned before)."""
    return model.get("input_kinds") or ["text"]


def model_snapshot(config: ModelConfig) -> ModelSnapshot:
    """A model config as a call outside an agent's snapshot makes it (an eval case's judge)."""
    return _model_snapshot(config)


def _tool_snapshot(link: AgentTool) -> ToolSpec:
    tool = link.tool
    policy, rule = effective_policy(
        tool_policy=tool.approval_policy,
        tool_rule=tool.approval_rule,
        side_effect=tool.side_effect,
        override=link.approval,
        override_rule=link.approval_rule,
    )
    spec: ToolSpec = {
        "id": tool.pk,
        "name": tool.name,
        "description": link.model_description,
        "parameters": tool.parameters,
        "kind": tool.kind,
        "python_callable": tool.python_callable,
        "side_effect": tool.side_effect,
        "idempotent": tool.idempotent,
        "approval": {
            "policy": policy,
            "rule": rule,
            "timeout_seconds": tool.approval_timeout_seconds,
            "on_expiry": tool.approval_on_expiry,
        },
        "timeout_seconds": _float(tool.timeout_seconds),
        "max_result_chars": tool.max_result_chars,
    }
    # What the executors need to make the call; credentials stay on the rows (encrypted).
    if tool.kind == ToolDefinition.Kind.HTTP:
        spec["http"] = {
            "method": tool.http_method,
            "url": tool.http_url,
            "query_params": tool.http_query_params,
            "body_argument": tool.http_body_argument,
            "headers": tool.http_headers,
            "response_pointer": tool.http_response_pointer,
            "max_response_bytes": tool.http_max_response_bytes,
        }
    elif tool.kind == ToolDefinition.Kind.MCP:
        spec["mcp"] = {"server_id": tool.mcp_server_id, "tool_name": tool.mcp_tool_name}
    elif tool.kind == ToolDefinition.Kind.A2A:
        spec["a2a"] = {"card_url": tool.a2a_card_url, "skill": tool.a2a_skill}
    return spec


def snapshot_guardrails(snapshot: AgentSnapshot) -> GuardrailsSnapshot | None:
    return snapshot.get("guardrails")


def snapshot_memory(snapshot: AgentSnapshot) -> MemorySnapshot | None:
    return snapshot.get("memory")


def _memory_snapshot(agent: Agent) -> MemorySnapshot:
    kept = set(agent.memory_kinds or MEMORY_KINDS)
    memory: MemorySnapshot = {
        "space": agent.memory_space,
        # In a fixed order, so the same choice pins the same version however it was typed.
        "kinds": [kind for kind in MEMORY_KINDS if kind in kept],
        "shown": agent.memory_shown,
        "ttl_days": agent.memory_ttl_days,
    }
    if agent.memory_embedding_model_id:
        # Read from the database, not a config the instance may hold from before an edit: what
        # agents.selectors.agent_config_state reads too, so a version found by it is this one.
        config = ModelConfig.objects.get(pk=agent.memory_embedding_model_id)
        memory["embedding_model"] = _model_snapshot(config)
    if agent.memory_daily_tokens is not None:
        memory["daily_tokens"] = agent.memory_daily_tokens
    return memory


def _guardrail_snapshot(rule: GuardrailRule) -> GuardrailSpec:
    spec: GuardrailSpec = {"id": rule.pk, "side": rule.side, "kind": rule.kind, "action": rule.action}
    if rule.kind == KIND_TERMS:
        spec["terms"] = terms_parse(rule.terms)
    elif rule.kind == KIND_PATTERN:
        spec["pattern"] = rule.pattern
    elif rule.kind == KIND_MODERATION:
        spec["model"] = dict(_model_snapshot(rule.model_config))
        spec["rubric"] = rule.rubric
    return spec


def _delegate_snapshot(delegate: AgentDelegate) -> ToolSpec:
    return {
        "id": None,
        "name": delegate.tool_name,
        "description": delegate.description,
        "parameters": DELEGATE_PARAMETERS,
        "kind": DELEGATE_KIND,
        "python_callable": "",
        "side_effect": "write",
        "idempotent": False,
        # A delegate never asks for approval itself: the tools of the child's run do.
        "approval": {
            "policy": ApprovalPolicy.NEVER,
            "rule": "",
            "timeout_seconds": None,
            "on_expiry": ApprovalExpiry.CONTINUE,
        },
        "timeout_seconds": None,
        "max_result_chars": ToolDefinition._meta.get_field("max_result_chars").default,
        "delegate": {"agent_id": delegate.child_id, "agent_slug": delegate.child.slug, "delegate_id": delegate.pk},
    }


def callable_tools(
    *, links: Iterable[AgentTool], delegates: Iterable[AgentDelegate]
) -> tuple[list[AgentTool], list[AgentDelegate]]:
    """The tool links and delegates (agents as tools) whose tools the agent's model may call:
    enabled, and to an active tool or agent. snapshot_build pins exactly these, so they are the
    names the engine takes for a forced tool choice; the agent admin checks one against them,
    unsaved rows included, before anything is saved (callable_tool_names)."""
    return (
        [link for link in links if link.enabled and link.tool.is_active],
        [delegate for delegate in delegates if delegate.enabled and delegate.child.is_active],
    )


def callable_tool_names(*, links: Iterable[AgentTool], delegates: Iterable[AgentDelegate]) -> set[str]:
    """The names the agent's model may call, as the tools of its snapshot are named."""
    tools, agents = callable_tools(links=links, delegates=delegates)
    return {link.tool.name for link in tools} | {delegate.tool_name for delegate in agents}


def snapshot_build(*, agent: Agent, links: Iterable[AgentTool] | None = None) -> AgentSnapshot:
    """The agent's configuration now, as a version would pin it. `links` (unsaved ones may be
    among them) stand for the agent's own tool links: the prompt playground's tool selection.

    Posts reuse a version while agents.selectors.agent_config_state is unchanged: that read
    must cover every row read here."""
    if links is None:
        links = AgentTool.objects.filter(agent=agent).select_related("tool").order_by("tool__name")
    links, delegates = callable_tools(
        links=links,
        delegates=AgentDelegate.objects.filter(parent=agent).select_related("child").order_by("tool_name"),
    )
    snapshot: AgentSnapshot = {
        "agent": {
            "id": agent.pk,
            "name": agent.name,
            "slug": agent.slug,
            "system_prompt": agent.system_prompt,
            "time_zone": agent.time_zone,
            "language": agent.language,
            "max_iterations": agent.max_iterations,
            "max_same_tool_streak": agent.max_same_tool_streak,
            "tool_choice": agent.tool_choice,
            "tool_choice_name": agent.tool_choice_name,
            "parallel_tool_calls": agent.parallel_tool_calls,
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
        "fallback_model": _model_snapshot(agent.fallback_model_config) if agent.fallback_model_config_id else None,
        "tools": [*(_tool_snapshot(link) for link in links), *(_delegate_snapshot(d) for d in delegates)],
    }
    if agent.output_schema is not None:
        snapshot["agent"]["output_schema"] = agent.output_schema
        snapshot["agent"]["output_repair_turns"] = agent.output_repair_turns
    enabled = GuardrailRule.objects.filter(agent=agent, enabled=True).select_related("model_config").order_by("id")
    rules = [_guardrail_snapshot(rule) for rule in enabled]
    if rules:
        snapshot["guardrails"] = {"redact_stored": agent.guardrail_redact_stored, "rules": rules}
    if agent.memory_enabled:
        snapshot["memory"] = _memory_snapshot(agent)
    conversions = _conversions_snapshot(agent)
    if conversions is not None:
        snapshot["conversions"] = conversions
    routing = [
        _routing_rule_snapshot(rule)
        for rule in RoutingRule.objects.filter(agent=agent, enabled=True)
        .select_related("model_config", "classifier_model")
        .order_by("position", "id")
    ]
    if routing:
        snapshot["routing"] = {"rules": routing}
    return snapshot


def _routing_rule_snapshot(rule: RoutingRule) -> RoutingRuleSpec:
    spec: RoutingRuleSpec = {
        "id": rule.pk,
        "name": rule.name,
        "condition": rule.condition,
        "model": _model_snapshot(rule.model_config),
    }
    condition = RoutingRule.Condition
    if rule.condition == condition.INPUT_LENGTH:
        spec["length_unit"] = rule.length_unit or RoutingRule.LengthUnit.CHARS
        spec["length_over"] = rule.length_over
        spec["length_under"] = rule.length_under
    elif rule.condition == condition.ATTACHMENTS:
        spec["attachment_kind"] = rule.attachment_kind
    elif rule.condition == condition.TIER:
        spec["tiers"] = routing_values(rule.tiers)
    elif rule.condition == condition.TIME_OF_DAY:
        spec["time_start"] = rule.time_start.isoformat()
        spec["time_end"] = rule.time_end.isoformat()
        spec["time_zone"] = rule.time_zone
    elif rule.condition == condition.CLASSIFIER:
        spec["classifier_model"] = _model_snapshot(rule.classifier_model)
        spec["classifier_prompt"] = rule.classifier_prompt
        spec["labels"] = routing_values(rule.labels)
    return spec


def snapshot_routing(snapshot: AgentSnapshot) -> RoutingSnapshot | None:
    """The version's routing rules; None for an agent without any (and for versions pinned
    before routing existed)."""
    return snapshot.get("routing")


def _conversions_snapshot(agent: Agent) -> ConversionsSnapshot | None:
    kinds = {
        kind: choice
        for kind, choice in (("audio", agent.audio_parts), ("image", agent.image_parts), ("file", agent.file_parts))
        if choice != "refuse"
    }
    if not kinds:
        return None
    conversions: ConversionsSnapshot = {"kinds": kinds}
    if kinds.get("audio") == "transcribe" and agent.transcription_model_config_id:
        conversions["transcription_model"] = _model_snapshot(agent.transcription_model_config)
    if kinds.get("image") == "describe" and agent.description_model_config_id:
        conversions["description_model"] = _model_snapshot(agent.description_model_config)
    return conversions


def snapshot_output(snapshot: AgentSnapshot) -> tuple[dict | None, int]:
    """The version's output schema (None: free text) and how many repair turns it allows."""
    agent = snapshot["agent"]
    return agent.get("output_schema"), agent.get("output_repair_turns", 0)


def snapshot_conversions(snapshot: AgentSnapshot) -> ConversionsSnapshot | None:
    return snapshot.get("conversions")
