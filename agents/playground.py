"""The prompt playground's drafts: the agent's saved configuration with an operator's edits
(prompt, model config and its parameters, the agent's own parameters, the tool selection),
checked by the same model validation the admin uses, and pinned as a playground AgentVersion
(AgentVersion.playground) so that a test run points at exactly the configuration it ran."""

import copy
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from agents.models import Agent, AgentTool, AgentVersion, ModelConfig, ToolChoice
from agents.snapshot import AgentSnapshot, snapshot_build, snapshot_hash
from tools.models import ToolDefinition

# The agent's own settings the playground edits; "save as draft" writes these into the agent.
AGENT_FIELDS = (
    "system_prompt",
    "max_iterations",
    "max_same_tool_streak",
    "tool_choice",
    "tool_choice_name",
    "parallel_tool_calls",
    "context_max_turns",
    "context_tool_result_max_chars",
    "context_token_budget",
    "run_token_budget",
    "run_cost_budget",
    "run_timeout_seconds",
)
# The model config's parameters a snapshot carries and a test may change. They belong to the
# model config, which other agents may share: a run takes them, "save as draft" does not.
MODEL_FIELDS = (
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "reasoning_effort",
    "thinking",
    "thinking_budget_tokens",
)


@dataclass(frozen=True)
class PlaygroundEdits:
    """What the operator changed from the agent's saved configuration: only the keys given."""

    agent_fields: dict = field(default_factory=dict)
    model_config: ModelConfig | None = None  # None: the agent's own
    model_params: dict = field(default_factory=dict)
    tools: list[ToolDefinition] | None = None  # None: the agent's enabled links


def workspace_tools(*, agent: Agent):
    """The tools the agent could link: its workspace's active ones, in a snapshot's order."""
    return ToolDefinition.objects.filter(workspace_id=agent.workspace_id, is_active=True).order_by("name")


def _edited_agent(agent: Agent, edits: PlaygroundEdits) -> Agent:
    """A copy of `agent` with the edits, validated as the admin's form validates it (fields,
    the workspace rule for its model config, tool choice); ValidationError otherwise."""
    # A model's copy has its own field cache (Model.__getstate__), so the saved agent is untouched.
    edited = copy.copy(agent)
    for name, value in edits.agent_fields.items():
        if name not in AGENT_FIELDS:
            raise ValidationError({name: _("The playground does not change this field.")})
        setattr(edited, name, value)
    if edits.model_config is not None:
        edited.model_config = edits.model_config
    # As the admin's form: the release fields are agents.releases' (agents.admin.RELEASE_FIELDS),
    # and the slug, unchanged, is not this form's question.
    edited.full_clean(exclude=["slug", "published_version", "canary_version", "canary_percent"])
    return edited


def _edited_model(config: ModelConfig, params: dict) -> ModelConfig:
    edited = copy.copy(config)
    for name, value in params.items():
        if name not in MODEL_FIELDS:
            raise ValidationError({name: _("The playground does not change this parameter.")})
        setattr(edited, name, value)
    # Its name is the saved config's: not re-checked for uniqueness.
    edited.full_clean(exclude=["name", "workspace"], validate_unique=False)
    return edited


def playground_links(*, agent: Agent, tools: list[ToolDefinition]) -> list[AgentTool]:
    """Links for the selected tools: the agent's own link where it has one (with its approval and
    description for this agent), enabled; a new, unsaved one with the defaults otherwise."""
    own = {link.tool_id: link for link in AgentTool.objects.filter(agent=agent).select_related("tool")}
    links = []
    for tool in sorted(tools, key=lambda t: t.name):
        link = copy.copy(own[tool.pk]) if tool.pk in own else AgentTool(agent=agent, tool=tool)
        link.enabled = True
        links.append(link)
    return links


def playground_snapshot(*, agent: Agent, edits: PlaygroundEdits) -> AgentSnapshot:
    """The snapshot a version of the edited draft pins. ValidationError on a bad edit."""
    edited = _edited_agent(agent, edits)
    if edits.model_params:
        edited.model_config = _edited_model(edited.model_config, edits.model_params)
    links = None
    if edits.tools is not None:
        foreign = [tool.name for tool in edits.tools if tool.workspace_id != agent.workspace_id or not tool.is_active]
        if foreign:
            raise ValidationError({"tools": _("Choose tools of this agent's workspace.")})
        links = playground_links(agent=agent, tools=edits.tools)
    if edited.tool_choice == ToolChoice.TOOL:
        names = {link.tool.name for link in links} if links is not None else None
        if names is not None and edited.tool_choice_name not in names:
            raise ValidationError({"tool_choice_name": _("The named tool must be one of the selected tools.")})
    return snapshot_build(agent=edited, links=links)


def playground_version(*, agent: Agent, snapshot: AgentSnapshot) -> AgentVersion:
    """The playground version with exactly `snapshot`, written if the agent has none with its
    hash (deduplicated by hash, as versions are). It is never numbered nor released."""
    digest = snapshot_hash(snapshot)
    found = AgentVersion.objects.filter(agent=agent, playground=True, config_hash=digest).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return AgentVersion.objects.create(
                agent=agent, number=0, playground=True, config_hash=digest, snapshot=snapshot
            )
    except IntegrityError:
        # Another request wrote the same configuration first.
        return AgentVersion.objects.get(agent=agent, playground=True, config_hash=digest)


def playground_save(*, agent: Agent, edits: PlaygroundEdits) -> Agent:
    """Write the edited agent fields, model config and tool selection into the agent (its saved
    configuration, the draft), validated as the admin validates them; each save goes through
    the models' save(), so the audit records it as any configuration change. The model's
    parameters are the shared model config's and are not written here."""
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        edited = _edited_agent(agent, edits)
        if edits.tools is not None:
            foreign = [t for t in edits.tools if t.workspace_id != agent.workspace_id or not t.is_active]
            if foreign:
                raise ValidationError({"tools": _("Choose tools of this agent's workspace.")})
            if edited.tool_choice == ToolChoice.TOOL and edited.tool_choice_name not in {t.name for t in edits.tools}:
                raise ValidationError({"tool_choice_name": _("The named tool must be one of the selected tools.")})
        changed = [name for name in AGENT_FIELDS if getattr(edited, name) != getattr(agent, name)]
        if edited.model_config_id != agent.model_config_id:
            changed.append("model_config")
        if changed:
            edited.save(update_fields=changed)
        if edits.tools is not None:
            _links_save(agent=edited, tools=edits.tools)
    return edited


def _links_save(*, agent: Agent, tools: list[ToolDefinition]) -> None:
    """Links of the selected tools enabled (or made), the others disabled: a link keeps its
    approval and description settings when it is turned off."""
    wanted = {tool.pk: tool for tool in tools}
    for link in AgentTool.objects.filter(agent=agent).select_related("tool"):
        enabled = link.tool_id in wanted
        wanted.pop(link.tool_id, None)
        if link.enabled != enabled:
            link.enabled = enabled
            link.full_clean()
            link.save(update_fields=["enabled"])
    for tool in wanted.values():
        link = AgentTool(agent=agent, tool=tool)
        link.full_clean()
        link.save()
