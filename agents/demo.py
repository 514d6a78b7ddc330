"""The seed 000 demo: the customer-service agent with its three tools, on the shipped fake model."""

from agents.models import Agent, AgentTool, ModelConfig
from tools.models import ToolDefinition
from tools.services import tool_definitions_sync_from_registry

DEMO_TOOLS = ["mojitianqi-DayWeather", "gaodedetu-plan_driving", "gaodedetu-plan_bicycle"]
DEMO_SYSTEM_PROMPT = "今天是 {{ now_cn }} 。# 角色\n你是一名强子开发的智能客服。\n\n"


def demo_seed(*, llm_base_url: str, stream: bool = True) -> Agent:
    """Create or refresh the demo rows; safe to run again."""
    tool_definitions_sync_from_registry()
    model, _ = ModelConfig.objects.update_or_create(
        name="demo",
        defaults={
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
        },
    )
    agent, _ = Agent.objects.update_or_create(
        slug="customer-service",
        defaults={
            "name": "智能客服",
            "model_config": model,
            "system_prompt": DEMO_SYSTEM_PROMPT,
            "time_zone": "Asia/Shanghai",
            "description": "Seed 000's weather and route assistant.",
        },
    )
    for tool in ToolDefinition.objects.filter(name__in=DEMO_TOOLS):
        AgentTool.objects.get_or_create(agent=agent, tool=tool)
    return agent
