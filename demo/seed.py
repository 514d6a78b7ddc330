"""The seed 000 demo: the customer-service agent with its three tools, on the shipped fake model,
and the same agent with long-term memory on (the memory scene, demo/memory.py)."""

from django.db import transaction

from agents.models import Agent, AgentTool, ModelConfig
from agents.releases import version_publish
from tools.models import ToolDefinition
from tools.services import tool_definitions_sync_from_registry
from workspaces.defaults import default_workspace_id

DEMO_TOOLS = ["mojitianqi-DayWeather", "gaodedetu-plan_driving", "gaodedetu-plan_bicycle"]
DEMO_SYSTEM_PROMPT = "今天是 {{ now_cn }} 。# 角色\n你是一名强子开发的智能客服。\n\n"
DEMO_WEATHER_TOOL = "mojitianqi-DayWeather"
# A description that no longer says the tool gives the weather: the demo model (fakellm's
# needs_description) then does not call it, as a real model might not.
DEGRADED_DESCRIPTION = "Returns data."
# Seed 000's agent again with long-term memory on: a separate agent, so turning memory on changes
# neither seed 000's versions nor what its eval suite compares.
DEMO_MEMORY_AGENT = "customer-service-memory"


def demo_seed(*, llm_base_url: str, stream: bool = True, reset: bool = False) -> Agent:
    """Create the demo rows that are missing and leave the others as an operator left them (a
    restart of the stack must not undo an edit, nor the degraded draft an eval compares). With
    `reset`, bring every row back to the demo's configuration, the tools' own descriptions
    included (undoes demo_degrade_draft)."""
    tool_definitions_sync_from_registry()
    seed = _reset_or_create if reset else _get_or_create
    agent_defaults = {
        "name": "智能客服",
        "model_config": _demo_model(llm_base_url=llm_base_url, stream=stream, seed=seed),
        "system_prompt": DEMO_SYSTEM_PROMPT,
        "time_zone": "Asia/Shanghai",
        "description": "Seed 000's weather and route assistant.",
    }
    agent = seed(Agent, {"slug": "customer-service"}, agent_defaults)
    _demo_tools_link(agent=agent, reset=reset)
    return agent


def demo_memory_seed(*, llm_base_url: str, stream: bool = True, reset: bool = False) -> Agent:
    """Seed 000's agent with long-term memory on (every kind, five memories shown, kept 90 days
    unless used), on the same model config and tools; created where missing like demo_seed, and
    with `reset` brought back to this configuration."""
    tool_definitions_sync_from_registry()
    seed = _reset_or_create if reset else _get_or_create
    agent_defaults = {
        "name": "智能客服（长期记忆）",
        "model_config": _demo_model(llm_base_url=llm_base_url, stream=stream, seed=seed),
        "system_prompt": DEMO_SYSTEM_PROMPT,
        "time_zone": "Asia/Shanghai",
        "description": "Seed 000's assistant with long-term memory: it remembers where each end user lives.",
        "memory_enabled": True,
        "memory_space": "",
        "memory_kinds": [],
        "memory_shown": 5,
        "memory_ttl_days": 90,
    }
    agent = seed(Agent, {"slug": DEMO_MEMORY_AGENT}, agent_defaults)
    _demo_tools_link(agent=agent, reset=reset)
    return agent


def _demo_model(*, llm_base_url: str, stream: bool, seed) -> ModelConfig:
    model_defaults = {
        "base_url": llm_base_url,
        "model": "demo",
        "temperature": 0.8,
        "top_p": 1,
        "max_tokens": 4096,
        "frequency_penalty": 0,
        "stream": stream,
        "max_retries": 2,
        "price_input_per_million": "0.15",
        "price_output_per_million": "1.50",
        "price_cached_input_per_million": "0.03",
        # The shipped fake server answers images, files and audio (fakellm).
        "input_kinds": ["text", "image", "audio", "file"],
    }
    # The demo's own rows are in the installation's first workspace, where names are looked up.
    return seed(ModelConfig, {"workspace_id": default_workspace_id(), "name": "demo"}, model_defaults)


def _demo_tools_link(*, agent: Agent, reset: bool) -> None:
    for tool in ToolDefinition.objects.filter(workspace_id=agent.workspace_id, name__in=DEMO_TOOLS):
        link, created = AgentTool.objects.get_or_create(agent=agent, tool=tool)
        if reset and not created and link.description_override:
            link.description_override = ""
            link.save(update_fields=["description_override"])


def _get_or_create(model, lookup: dict, defaults: dict):
    return model.objects.get_or_create(**lookup, defaults=defaults)[0]


def _reset_or_create(model, lookup: dict, defaults: dict):
    return model.objects.update_or_create(**lookup, defaults=defaults)[0]


@transaction.atomic
def demo_degrade_draft(*, agent: Agent) -> AgentTool:
    """Publish the demo agent's configuration if it never was, then make its draft a worse one:
    the weather tool described vaguely for this agent only (the shared tool is left as it is), so
    an eval of the draft against the published version shows the regression."""
    if agent.published_version_id is None:
        version_publish(agent=agent, user=None, note="Seed 000 demo: the tools as they are described.")
    link = AgentTool.objects.get(agent=agent, tool__name=DEMO_WEATHER_TOOL)
    link.description_override = DEGRADED_DESCRIPTION
    link.save(update_fields=["description_override"])
    return link
