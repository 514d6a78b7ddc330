"""Writes of the monitoring pages: the try-an-agent page posts through the real queue."""

from django.db import transaction
from django.utils.translation import gettext as _

from agents.models import Agent
from conversations.models import Conversation, Run
from conversations.services import conversation_create
from engine.admission import message_post


class ConversationNotFound(Exception):
    pass


def try_message_post(*, agent: Agent, user, content: str, conversation_id=None, version=None) -> Run:
    """Post a staff member's message to an agent, continuing their try-out conversation when
    one is given (it must be theirs and with this agent), on the version asked for if any."""
    with transaction.atomic():
        if conversation_id:
            conversation = Conversation.objects.filter(pk=conversation_id, agent=agent, owner=user).first()
            if conversation is None:
                raise ConversationNotFound(_("That conversation is not yours or is with another agent."))
        else:
            conversation = conversation_create(
                agent=agent, owner=user, title=f"Try-out: {content[:80]}", metadata={"source": "monitor-try"}
            )
        return message_post(conversation=conversation, content=content, version=version)
