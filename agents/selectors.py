"""Reads for agents."""

from datetime import date
from decimal import Decimal

from agents.models import AgentUsageDay


def agent_usage_on(*, agent_id: int, day: date) -> tuple[int, Decimal]:
    """(tokens, cost) the agent used on `day` in its time zone."""
    row = AgentUsageDay.objects.filter(agent_id=agent_id, day=day).values_list("total_tokens", "cost").first()
    return row if row else (0, Decimal(0))
