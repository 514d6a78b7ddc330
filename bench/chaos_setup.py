"""The chaos agent: one write tool on the counting service (not idempotent, always approved by
a person), then a read tool, then an answer. It keeps long-term memory: a completed run of a
conversation with an end user is followed by a memory extraction, a model call of its own that
workers are killed during too."""

from agents.models import Agent, AgentTool, ModelConfig
from tools.models import ToolDefinition
from tools.services import tool_definitions_sync_from_registry

WRITE_TOOL = "chaos-count-write"


def chaos_script(latency_ms: int) -> dict:
    return {
        "scenarios": [
            {
                "match": r"order (?P<n>\d+)",
                "steps": [
                    {"tool_calls": [{"name": WRITE_TOOL, "arguments": {"order": "{n}"}}], "latency_ms": latency_ms},
                    {
                        "tool_calls": [{"name": "mojitianqi-DayWeather", "arguments": {"city": "成都市"}}],
                        "latency_ms": latency_ms,
                    },
                    {"content": "order {n} recorded", "latency_ms": latency_ms},
                ],
            }
        ],
        "memory_extraction": {"extract_memory": True, "latency_ms": latency_ms},
    }


def count_write_tool(counting_url: str) -> ToolDefinition:
    """The counting service's write (bench.counting_service): not idempotent, always approved by a person."""
    tool_definitions_sync_from_registry()
    write, _ = ToolDefinition.objects.update_or_create(
        name=WRITE_TOOL,
        defaults={
            "description": "Records an order on the counting service.",
            "kind": ToolDefinition.Kind.HTTP,
            "parameters": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
            "http_method": "POST",
            "http_url": f"{counting_url}/writes",
            "side_effect": "write",
            "idempotent": False,
            "approval_policy": "always",
            "approval_timeout_seconds": None,
            "timeout_seconds": 10,
        },
    )
    return write


def chaos_agent(*, llm_api_base: str, model: str, counting_url: str) -> Agent:
    write = count_write_tool(counting_url)
    config, _ = ModelConfig.objects.update_or_create(
        name="chaos", defaults={"base_url": llm_api_base, "model": model, "max_retries": 3}
    )
    agent, _ = Agent.objects.update_or_create(
        slug="chaos",
        defaults={
            "name": "Chaos",
            "model_config": config,
            "system_prompt": "Record orders.",
            "max_iterations": 6,
            "memory_enabled": True,
        },
    )
    weather = ToolDefinition.objects.get(workspace_id=agent.workspace_id, name="mojitianqi-DayWeather")
    for tool in (write, weather):
        AgentTool.objects.get_or_create(agent=agent, tool=tool)
    return agent
