"""Reads of memories for people outside a run: the API's list of an end user's memories."""

from django.db.models import Q, QuerySet
from django.utils import timezone

from agents.models import Agent
from conversations.end_users import EndUser, end_user_q
from memory.models import Memory


def agent_memory_scope(*, agent: Agent) -> str:
    """The scope the agent's current configuration keeps memories in (memory.services.memory_scope
    of the snapshot it would pin)."""
    return agent.memory_space or f"agent:{agent.pk}"


def end_user_memories(*, person: EndUser, scope: str | None = None, channel: str | None = None) -> QuerySet[Memory]:
    """The person's unexpired memories, newest first; only one scope's, or one channel's
    (memory.channels), if given. Every channel's otherwise: the owner speaks for all of theirs,
    as their list of the end user's conversations does."""
    memories = Memory.objects.filter(end_user_q(person)).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    )
    if scope is not None:
        memories = memories.filter(scope=scope)
    if channel is not None:
        memories = memories.filter(channel=channel)
    return memories.order_by("-updated_at", "pk")
