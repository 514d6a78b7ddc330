"""The files and images a chat message carries, turned into attachments of its run.

The service's callback must be answered within its deadline (Slack's three seconds, Telegram's
and the others' few), and a file can take longer to download: the callback only records the
event (deduplicated like any other) and the task `chat_files_task` does the rest after it commits.
Each file is fetched as its service documents it (chatbots.replies.chat_file_bytes: through the
outbound guard, with the bot token or the cached access token), stored with attachment_store for
the channel's owner and the conversation's end user (a new thread: the chat user's) in the
channel's workspace, and the message is posted with them. A file refused (too many, too large,
a type not accepted, a kind the agent's model does not take and does not turn into text, or not
fetched) is told in the thread with the refusal's words; the rest of the message still goes,
and a message left with nothing is refused like an empty one."""

import logging

from django.utils.translation import gettext as _

from attachments.limits import per_message_check
from attachments.services import attachment_store
from attachments.sniff import AttachmentRefused
from chatbots.inbound import chat_run_start, chat_user_of
from chatbots.models import ChatEvent, ChatThread
from chatbots.replies import PostFailed, _send_recorded, chat_file_bytes, chat_notice
from chatbots.services import SERVICES
from chatbots.services.base import ChatMessage
from engine.admission_parts import PartNotTaken

log = logging.getLogger(__name__)


def _file_name(file: dict) -> str:
    return str(file.get("name") or "file")[:200]


def _attachments(event: ChatEvent, service, message: ChatMessage, end_user: str, notices: list[str]) -> list:
    channel = event.channel
    files = [file for file in message.files if isinstance(file, dict)]
    try:
        per_message_check(len(files))
    except AttachmentRefused as exc:
        notices.append(exc.message)
        return []
    stored = []
    for file in files:
        try:
            data = chat_file_bytes(channel, service, message, file)
            stored.append(
                attachment_store(
                    workspace=channel.agent.workspace,
                    uploaded_by=channel.owner,
                    owner=channel.owner,
                    end_user=end_user,
                    data=data,
                    name=_file_name(file),
                )
            )
        except AttachmentRefused as exc:
            notices.append(exc.message)
        except (PostFailed, ValueError, KeyError) as exc:
            log.info("chat channel %s could not fetch a file: %s", channel.pk, exc)
            notices.append(_("The file “%(name)s” could not be fetched from the chat.") % {"name": _file_name(file)})
    return stored


def chat_files_receive(*, event_id: int, text: str, files: list[dict]) -> None:
    """Fetch and store the files of the message `event_id` recorded, then start its run."""
    event = ChatEvent.objects.select_related("channel__agent__workspace", "channel__owner").filter(pk=event_id).first()
    if event is None or event.run_id is not None or event.outcome != ChatEvent.Outcome.STARTED:
        return
    channel = event.channel
    service = SERVICES.get(channel.service)
    chat_user = chat_user_of(channel=channel, user_id=event.chat_user_id)
    if service is None or chat_user is None:
        return
    message = ChatMessage(
        event_id=event.event_id,
        user_id=event.chat_user_id,
        thread_id=event.thread_id,
        text=text,
        files=files,
        reply_to=event.reply_to if isinstance(event.reply_to, dict) else {},
    )
    thread = (
        ChatThread.objects.select_related("conversation").filter(channel=channel, thread_id=event.thread_id).first()
    )
    end_user = thread.conversation.end_user if thread is not None else chat_user.end_user
    notices: list[str] = []
    attachments = _attachments(event, service, message, end_user, notices)
    while attachments or text.strip():
        try:
            chat_run_start(event=event, channel=channel, chat_user=chat_user, message=message, attachments=attachments)
            break
        except PartNotTaken as exc:
            notices.append(exc.message)
            # The refusal names the attachment its models do not take: the others still go.
            kept = [a for a in attachments if f"“{a.name}”" not in exc.message]
            attachments = kept if len(kept) < len(attachments) else []
    else:
        detail = "\n".join(notices) or _("The message is empty.")
        ChatEvent.objects.filter(pk=event.pk).update(outcome=ChatEvent.Outcome.REFUSED, detail=detail)
        _notice(lambda: chat_notice(event_id=event.pk))
        return
    if event.outcome == ChatEvent.Outcome.REFUSED:
        detail = "\n".join([*notices, event.detail])
        ChatEvent.objects.filter(pk=event.pk).update(detail=detail)
        _notice(lambda: chat_notice(event_id=event.pk))
        return
    if notices:
        text_told = "\n".join(notices)
        _notice(
            lambda: _send_recorded(
                event, lambda secrets: service.reply_request(message, text_told, secrets, channel.api_base)
            )
        )


def _notice(send) -> None:
    try:
        send()
    except PostFailed as exc:
        log.info("a chat notice was not posted: %s", exc)
