"""Writes of the monitoring pages: the try-an-agent page posts through the real queue."""

from django.db import transaction
from django.utils.translation import gettext as _

from agents.models import Agent
from attachments.models import Attachment
from attachments.selectors import attachments_named
from attachments.services import attachment_store
from conversations.models import Conversation, Run, RunTrigger
from conversations.services import conversation_create
from engine.admission import message_submit


class ConversationNotFound(Exception):
    pass


def try_attachment_store(*, agent: Agent, user, end_user: str, upload) -> Attachment:
    """A file for the staff member's next message to `agent` as `end_user`: theirs, in the
    agent's workspace (AttachmentRefused when it is not accepted)."""
    return attachment_store(
        workspace=agent.workspace,
        uploaded_by=user,
        owner=user,
        end_user=end_user,
        data=upload,
        name=upload.name or "",
    )


def try_message_post(
    *,
    agent: Agent,
    user,
    content: str,
    conversation_id=None,
    version=None,
    end_user: str = "",
    attachment_ids=(),
) -> Run:
    """Post a staff member's message to an agent, continuing their try-out conversation when
    one is given (it must be theirs, with this agent and this end user), on the version asked
    for if any. With `end_user` the staff member speaks as that end user of theirs (the
    conversation's owner), as an application would: the agent's memory and its limits per end
    user apply (AdmissionRefused, and a new conversation is not kept). `attachment_ids` name
    files uploaded by try_attachment_store for this end user (AttachmentRefused for one that
    is not theirs, or past the per-message count)."""
    attachments = (
        attachments_named(user=user, attachment_ids=attachment_ids, end_user=end_user) if attachment_ids else ()
    )
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
                title=f"Try-out: {content[:80] or _('attachments')}",
                metadata={"source": "monitor-try"},
                end_user=end_user,
            )
        return message_submit(
            conversation=conversation,
            content=content,
            version=version,
            trigger=RunTrigger.CONSOLE,
            attachments=attachments,
        ).run
