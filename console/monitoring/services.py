"""Writes of the monitoring pages: the try-an-agent page posts through the real queue."""

from django.db import transaction
from django.utils.translation import gettext as _

from agents.models import Agent
from conversations.models import Conversation, Run, RunTrigger
from conversations.services import conversation_create
from engine.admission import message_post


class ConversationNotFound(Exception):
    pass


def try_message_post(
    *, agent: Agent, user, content: str, conversation_id=None, version=None, end_user: str = ""
) -> Run:
    """Post a staff member's message to an agent, continuing their try-out conversation when
    one is given (it must be theirs, with this agent and this end user), on the version asked
    for if any. With `end_user` the staff member speaks as that end user of theirs (the
    conversation's owner), as an application would: the agent's memory and its limits per end
    user apply (AdmissionRefused, and a new conversation is not kept)."""
    with transaction.atomic():
        if conversation_id:
            conversation = Conversation.objects.filter(
                pk=conversation_id, agent=agent, owner=user, end_user=end_user
            ).first()
            if conversation is None:
                raise ConversationNotFound(_("That conversation is not yours, or is with another agent or end user."))
        else:
            conversation = conversation_create(
                agent=agent,
                owner=user,
                title=f"Try-out: {content[:80]}",
                metadata={"source": "monitor-try"},
                end_user=end_user,
            )
        return message_post(conversation=conversation, content=content, version=version, trigger=RunTrigger.CONSOLE)
