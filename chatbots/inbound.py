"""What a chat service's callback does, once its module has verified and parsed it.

A message from a chat user the channel knows (ChatUser, or any user with `auto_map_users`)
starts a run of the channel's agent, through admission like every way in: one conversation per
thread of the chat (ChatThread), owned by the channel's owner, for the chat user's end user. A
button press on an approval card decides the approval as the platform account the chat user is
mapped to, only if that account may decide it in the channel's workspace (the approval queue's
rule: workspaces.access, conversations.approvals.selectors) and the card's request hash is the
approval's (its arguments are still the ones the card showed).

Every accepted callback is a ChatEvent under the service's event id, written first in the same
transaction: a retried callback fails on its unique constraint and starts nothing."""

import json
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from chatbots.models import ChatChannel, ChatEvent, ChatThread, ChatUser
from chatbots.services.base import ButtonPress, ChatMessage
from conversations.approvals.selectors import approvals_visible_to
from conversations.end_users import EndUserInvalid, end_user_clean
from conversations.models import Approval, RunTrigger
from conversations.permissions import user_may_decide
from engine.admission import AgentOutsideWorkspace, ConversationBusy, conversation_start, message_submit
from engine.admission_parts import PartNotTaken
from engine.approvals import APPROVE, REJECT, ApprovalError, approval_decide
from memory.channels import channel_metadata
from platform_site.celery import app
from platform_site.crypto import SecretDecryptionError
from platform_site.refusals import InputRefused, LimitReached
from workspaces.access import binding_for, workspace_bind

log = logging.getLogger(__name__)

# Sent by name: chatbots.tasks wraps chatbots.files.
CHAT_FILES_TASK = "chatbots.tasks.chat_files_task"
# A card carries the approval's request hash, or (Telegram's 64-byte buttons) a prefix this long at least.
HASH_PREFIX_MIN = 32
ID_MAX_CHARS = ChatEvent._meta.get_field("event_id").max_length


class ChannelSecretsUnreadable(Exception):
    """The channel's secrets cannot be decrypted with the configured keys."""


class EventReplayed(Exception):
    """The service sent this event id before (a retry): nothing more is done."""


def channel_usable(*, channel_id) -> ChatChannel | None:
    """The channel if it takes callbacks: enabled, with an active agent; else None (one 404 for all)."""
    usable = ChatChannel.objects.select_related("agent__workspace", "owner").filter(
        pk=channel_id, enabled=True, agent__is_active=True
    )
    try:
        return usable.first()
    except SecretDecryptionError:
        log.error(
            "Chat channel %s refuses every callback: its secrets cannot be decrypted with the configured keys "
            "(AGENTRY_ENCRYPTION_KEYS). Enter them again in the admin.",
            channel_id,
        )
        raise ChannelSecretsUnreadable from None


def channel_secrets(channel: ChatChannel) -> dict[str, str]:
    """The channel's credentials by name (empty for a name not set)."""
    try:
        value = json.loads(channel.secrets or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _ids_check(event: ChatMessage | ButtonPress) -> None:
    """ValueError (a 400) unless the ids the event names can be stored and looked up as they are:
    an event id, and ids of at most ID_MAX_CHARS printable characters (PostgreSQL refuses NUL)."""
    if not event.event_id:
        raise ValueError("the event has no id")
    for name in ("event_id", "user_id", "thread_id"):
        value = getattr(event, name, "")
        if len(value) > ID_MAX_CHARS or not value.isprintable():
            raise ValueError(f"the event's {name} is not an id of at most {ID_MAX_CHARS} printable characters")
    if "\\u0000" in json.dumps(event.reply_to):
        raise ValueError("the event holds the NUL character")


def _event(channel: ChatChannel, event: ChatMessage | ButtonPress, outcome: str, **fields) -> ChatEvent:
    """The event's row, first in the caller's transaction: EventReplayed if its id was taken."""
    try:
        with transaction.atomic():
            return ChatEvent.objects.create(
                channel=channel,
                event_id=event.event_id,
                chat_user_id=event.user_id,
                reply_to=event.reply_to,
                outcome=outcome,
                **fields,
            )
    except IntegrityError:
        if ChatEvent.objects.filter(channel=channel, event_id=event.event_id).exists():
            raise EventReplayed from None
        raise


def chat_user_of(*, channel: ChatChannel, user_id: str) -> ChatUser | None:
    """The chat user as the channel knows them; with `auto_map_users`, an unknown one becomes
    the end user "<service>:<chat user id>"."""
    known = ChatUser.objects.filter(channel=channel, chat_user_id=user_id).select_related("account").first()
    if known is not None or not channel.auto_map_users or not user_id:
        return known
    try:
        end_user = end_user_clean(f"{channel.service}:{user_id}")
    except EndUserInvalid:
        return None
    user, _created = ChatUser.objects.get_or_create(
        channel=channel, chat_user_id=user_id, defaults={"end_user": end_user}
    )
    return user


def _content_refusal(text: str) -> str:
    if not text.strip():
        return _("The message is empty.")
    if len(text) > settings.AGENTRY_MESSAGE_MAX_CHARS:
        return _("The message is longer than %(limit)s characters.") % {"limit": settings.AGENTRY_MESSAGE_MAX_CHARS}
    if "\x00" in text:
        return _("The message contains the NUL character (U+0000).")
    return ""


def chat_message_receive(*, channel: ChatChannel, message: ChatMessage) -> ChatEvent:
    """The run a chat user's message starts (ChatEvent.run), or why it started none (the event's
    outcome and detail, told in the chat by chatbots.replies when the user is known).
    EventReplayed when the service sent it before."""
    _ids_check(message)
    with transaction.atomic():
        chat_user = chat_user_of(channel=channel, user_id=message.user_id)
        if chat_user is None:
            return _event(channel, message, ChatEvent.Outcome.UNKNOWN_USER, thread_id=message.thread_id)
        refusal = _content_refusal(message.text) if not message.files or message.text else ""
        if refusal:
            return _event(channel, message, ChatEvent.Outcome.REFUSED, detail=refusal)
        event = _event(channel, message, ChatEvent.Outcome.STARTED, thread_id=message.thread_id)
        if message.files:
            # Fetching the files takes longer than the service waits for its answer: the task
            # fetches and stores them, then starts the run (chatbots.files).
            event_pk, text, files = event.pk, message.text, message.files
            transaction.on_commit(lambda: app.tasks[CHAT_FILES_TASK].delay(event_pk, text, files))
            return event
        chat_run_start(event=event, channel=channel, chat_user=chat_user, message=message)
    return event


def chat_run_start(
    *, event: ChatEvent, channel: ChatChannel, chat_user: ChatUser, message: ChatMessage, attachments=()
):
    """Start the run answering `message` and link it to its event, or record why not on the event."""
    try:
        with transaction.atomic():
            run = _run_start(channel, chat_user, message, attachments)
    except (LimitReached, InputRefused, ConversationBusy, AgentOutsideWorkspace) as exc:
        if isinstance(exc, PartNotTaken):
            raise
        detail = getattr(exc, "message", "") or _("The agent is busy with this conversation; try again shortly.")
        if isinstance(exc, AgentOutsideWorkspace):
            detail = _("This channel's agent is not in its workspace.")
        ChatEvent.objects.filter(pk=event.pk).update(outcome=ChatEvent.Outcome.REFUSED, detail=detail)
        event.outcome, event.detail = ChatEvent.Outcome.REFUSED, detail
        return event
    ChatEvent.objects.filter(pk=event.pk).update(run=run)
    event.run = run
    return event


def _run_start(channel: ChatChannel, chat_user: ChatUser, message: ChatMessage, attachments=()):
    """The run answering `message` in its thread's conversation (a new one for a new thread)."""
    thread = (
        ChatThread.objects.select_related("conversation__agent")
        .filter(channel=channel, thread_id=message.thread_id)
        .first()
    )
    if thread is not None:
        return message_submit(
            conversation=thread.conversation,
            content=message.text,
            user=channel.owner,
            trigger=RunTrigger.CHAT_APP,
            workspace_id=channel.workspace_id,
            attachments=attachments,
        ).run
    run = conversation_start(
        agent=channel.agent,
        user=channel.owner,
        content=message.text,
        title=channel.name,
        end_user=chat_user.end_user,
        metadata=channel_metadata(chat_channel_id=channel.pk, shared=False),
        trigger=RunTrigger.CHAT_APP,
        workspace_id=channel.workspace_id,
        attachments=attachments,
    )
    ChatThread.objects.create(channel=channel, thread_id=message.thread_id, conversation_id=run.conversation_id)
    return run


def chat_press_receive(*, channel: ChatChannel, press: ButtonPress) -> ChatEvent:
    """The decision a button press takes, or why it takes none (the event's detail, told in the
    chat). EventReplayed when the service sent it before."""
    _ids_check(press)
    with transaction.atomic():
        check = _press_check(channel, press)
        outcome = ChatEvent.Outcome.REFUSED if check.refusal else ChatEvent.Outcome.DECIDED
        event = _event(channel, press, outcome, detail=check.refusal)
    if check.refusal:
        return event
    try:
        approval = approval_decide(
            approval_id=int(press.approval_id),
            user=check.account,
            decision=press.decision,
            channel=Approval.Channel.CHAT_APP,
            expected_hash=check.request_hash,
        )
    except ApprovalError as exc:
        detail, outcome = str(exc), ChatEvent.Outcome.REFUSED
    else:
        done = _("Approved by %(user)s.") if approval.status == Approval.Status.APPROVED else _("Rejected by %(user)s.")
        detail, outcome = done % {"user": check.account.get_username()}, ChatEvent.Outcome.DECIDED
    ChatEvent.objects.filter(pk=event.pk).update(outcome=outcome, detail=detail)
    event.outcome, event.detail = outcome, detail
    return event


@dataclass(frozen=True)
class PressCheck:
    """Why a press decides nothing (`refusal`), or the account it decides as and the full
    request hash its card was bound to."""

    refusal: str = ""
    account: object = None
    request_hash: str = ""


def _press_check(channel: ChatChannel, press: ButtonPress) -> PressCheck:
    chat_user = ChatUser.objects.filter(channel=channel, chat_user_id=press.user_id).select_related("account").first()
    account = chat_user.account if chat_user is not None else None
    if account is None or not account.is_active:
        return PressCheck(_("Your chat account is not linked to an approver's account on the platform."))
    # The queue's rule, in the channel's workspace: the account's role there decides.
    workspace_bind(account, binding_for(account, channel.workspace_id))
    if not user_may_decide(account):
        return PressCheck(_("Your account may not decide approvals in this workspace."))
    if press.decision not in (APPROVE, REJECT):
        return PressCheck(_("This button does not carry a decision."))
    if not press.approval_id.isascii() or not press.approval_id.isdigit() or len(press.approval_id) > 18:
        return PressCheck(_("This button does not name an approval."))
    visible = approvals_visible_to(user=account).filter(pk=int(press.approval_id), run__chat_event__channel=channel)
    request_hash = visible.values_list("arguments_hash", flat=True).first()
    if request_hash is None:
        return PressCheck(_("You may not decide this approval, or it is not one of this channel's."))
    given = press.request_hash.lower()
    if len(given) < HASH_PREFIX_MIN or not request_hash.startswith(given):
        return PressCheck(
            _("The arguments of this approval are not the ones the card showed; decide it on the approval page.")
        )
    return PressCheck(account=account, request_hash=request_hash)
