"""Reads on agents."""

from datetime import date
from decimal import Decimal

from django.db.models import Exists, OuterRef, Q, QuerySet

from agents.models import Agent, AgentUsageDay


def agent_usage_on(*, agent_id: int, day: date) -> tuple[int, Decimal]:
    """(tokens, cost) the agent used on `day` in its time zone."""
    row = AgentUsageDay.objects.filter(agent_id=agent_id, day=day).values_list("total_tokens", "cost").first()
    return row if row else (0, Decimal(0))


def agents_usable_by(*, user) -> QuerySet[Agent]:
    """Active agents the user may talk to: those without group restrictions, those shared with
    one of the user's groups, and all of them for superusers. Being staff grants nothing here:
    an agent restricted to a group stays restricted for operators outside it."""
    agents = Agent.objects.filter(is_active=True)
    if user.is_superuser:
        return agents
    restricted = Agent.allowed_groups.through.objects.filter(agent_id=OuterRef("pk"))
    shared = restricted.filter(group__user=user)
    return agents.filter(Q(~Exists(restricted)) | Q(Exists(shared)))
