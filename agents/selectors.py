"""Reads on agents."""

from django.db.models import Exists, OuterRef, Q, QuerySet

from agents.models import Agent


def agents_usable_by(*, user) -> QuerySet[Agent]:
    """Active agents the user may talk to: those without group restrictions, those shared with
    one of the user's groups, and all of them for staff."""
    agents = Agent.objects.filter(is_active=True)
    if user.is_staff:
        return agents
    restricted = Agent.allowed_groups.through.objects.filter(agent_id=OuterRef("pk"))
    shared = restricted.filter(group__user=user)
    return agents.filter(Q(~Exists(restricted)) | Q(Exists(shared)))
