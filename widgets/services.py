"""A widget's secret, the conversations of its end users, and the widget as its API and script see it."""

import secrets

from django.conf import settings
from django.db.models import QuerySet

from conversations.models import TERMINAL_STATUSES, Conversation, Run
from conversations.services import conversation_create
from engine.admission import agent_workspace_check
from engine.answer_schema import REPAIR_NAME
from memory.channels import channel_metadata
from widgets.models import Widget


def widget_secret_new() -> str:
    return "wsec_" + secrets.token_urlsafe(32)


def widget_secret_rotate(*, widget: Widget) -> str:
    """A new secret, in force at once: tokens signed with the old one are refused from now on."""
    widget.secret = widget_secret_new()
    widget.save(update_fields=["secret"])
    return widget.secret


def widget_usable(*, widget_id) -> Widget | None:
    """The widget if it may serve: enabled, with an active agent. Otherwise None (one 404 for all)."""
    return Widget.objects.select_related("agent").filter(pk=widget_id, enabled=True, agent__is_active=True).first()


def widget_conversations(*, widget: Widget, end_user: str) -> QuerySet[Conversation]:
    """The end user's conversations through this widget: its agent, its owner, and marked with
    its id, so another widget of the same agent and owner cannot read them."""
    return Conversation.objects.filter(
        agent_id=widget.agent_id, owner_id=widget.owner_id, end_user=end_user, metadata__widget=str(widget.pk)
    )


def widget_runs(*, widget: Widget, end_user: str) -> QuerySet[Run]:
    return Run.objects.filter(conversation__in=widget_conversations(widget=widget, end_user=end_user))


def widget_conversation_open(*, widget: Widget, end_user: str, conversation_id=None) -> tuple[Conversation, bool]:
    """(conversation, created): the end user's conversation `conversation_id` if it is theirs
    through this widget (Conversation.DoesNotExist if not), else a new one. A widget whose agent
    is another workspace's opens nothing (engine.admission.AgentOutsideWorkspace), as admission
    starts nothing for it."""
    agent_workspace_check(widget.agent, widget.workspace_id)
    if conversation_id is not None:
        return widget_conversations(widget=widget, end_user=end_user).get(pk=conversation_id), False
    conversation = conversation_create(
        agent=widget.agent,
        owner=widget.owner,
        end_user=end_user,
        metadata=channel_metadata(widget_id=widget.pk, shared=widget.memory_shared),
    )
    return conversation, True


def widget_conversation_state(*, conversation: Conversation) -> dict:
    """What the chat panel shows after a page load: the user's and the agent's messages with text
    or attachments (each with its parts, attachments.parts), and the run still answering, if any,
    to follow its events."""
    messages = list(
        conversation.messages.filter(role__in=["user", "assistant"])
        .exclude(content="", parts__isnull=True)
        .order_by("order")
    )
    # A repair turn (engine.answer_schema) is the platform's word to the model, and the answer it
    # corrects was never the run's: the end user saw neither, so a reload shows neither.
    corrected = {i - 1 for i, m in enumerate(messages) if m.name == REPAIR_NAME}
    messages = [m for i, m in enumerate(messages) if m.name != REPAIR_NAME and i not in corrected]
    active = (
        conversation.runs.exclude(status__in=TERMINAL_STATUSES).order_by("-created_at").values_list("pk", flat=True)
    )
    active_run = active.first()
    return {
        "id": str(conversation.pk),
        "messages": [
            {"role": m.role, "content": m.content, "parts": m.parts or [], "created_at": m.created_at} for m in messages
        ],
        "active_run": str(active_run) if active_run else None,
    }


def widget_public(*, widget: Widget) -> dict:
    """The widget as its script shows it, with the attachment limits it checks before uploading
    (the server checks them again: attachments.limits)."""
    return {
        "title": widget.title or widget.agent.name,
        "greeting": widget.greeting,
        "language": widget.language,
        "attachments": {
            "max_bytes": settings.AGENTRY_ATTACHMENT_MAX_BYTES,
            "per_message": settings.AGENTRY_ATTACHMENTS_PER_MESSAGE,
        },
    }
