"""The fault-injection agents: the 3-step agent of the benchmarks (two read tools, then an
answer) on a fake model that fails a seeded share of requests, through a plain and a streamed
model config."""

from agents.models import Agent, AgentTool, ModelConfig
from bench.scripts import three_step_script
from tools.models import ToolDefinition
from tools.services import tool_definitions_sync_from_registry

# Fault kinds as fakellm's faults.rate names them.
FAULT_KINDS = ("429", "500", "timeout", "malformed_json", "cut_stream")
TOOLS = ("mojitianqi-DayWeather", "gaodedetu-plan_bicycle")
MODEL_STEPS = 3  # model calls of a run that gets through: two tool steps, then the answer


def fault_script(*, rates: dict[str, float], seed: int, latency_ms: int, timeout_ms: int, retry_after: float) -> dict:
    return {
        **three_step_script(latency_ms),
        "faults": {
            "rate": {kind: rate for kind, rate in rates.items() if rate},
            "seed": seed,
            "retry_after": retry_after,
            "timeout_ms": timeout_ms,
        },
    }


def fault_agents(
    *, llm_api_base: str, model: str, max_retries: int, read_timeout: float, prefix: str = "faults"
) -> list[Agent]:
    """One agent per transport: plain JSON answers and streamed ones."""
    tool_definitions_sync_from_registry()
    agents = []
    for stream in (False, True):
        name = f"{prefix}-{'stream' if stream else 'plain'}"
        config, _ = ModelConfig.objects.update_or_create(
            name=name,
            defaults={
                "base_url": llm_api_base,
                "model": model,
                "stream": stream,
                "max_retries": max_retries,
                "read_timeout_seconds": read_timeout,
                "connect_timeout_seconds": read_timeout,
            },
        )
        agent, _ = Agent.objects.update_or_create(
            slug=name,
            defaults={
                "name": name,
                "model_config": config,
                "system_prompt": "Answer with the tools.",
                "max_iterations": 6,
            },
        )
        for tool in ToolDefinition.objects.filter(workspace_id=agent.workspace_id, name__in=TOOLS):
            AgentTool.objects.get_or_create(agent=agent, tool=tool)
        agents.append(agent)
    return agents
