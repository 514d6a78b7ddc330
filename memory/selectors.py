"""Reads of memories for people outside a run: the API's list of an end user's memories."""

from django.db.models import Q, QuerySet
from django.utils import timezone

from agents.models import Agent
from memory.models import Memory


def agent_memory_scope(*, agent: Agent) -> str:
    """The scope the agent's current configuration keeps memories in (memory.services.memory_scope
    of the snapshot it would pin)."""
    return agent.memory_space or f"agent:{agent.pk}"


def end_user_memories(*, owner, end_user: str, scope: str | None = None) -> QuerySet[Memory]:
    """The owner's end user's unexpired memories, newest first; only one scope's if given."""
    memories = Memory.objects.filter(owner=owner, end_user=end_user).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    )
    if scope is not None:
        memories = memories.filter(scope=scope)
    return memories.order_by("-updated_at", "pk")
