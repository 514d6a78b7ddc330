"""A2A's SendMessage as admission: the message's text becomes a run through engine.admission,
the real queue, with trigger A2A.

- No contextId: a new conversation (conversation_start), the task is its first run.
- A contextId (a conversation of this agent the user may post to): the next turn
  (message_submit), under the agent's concurrency policy; the messageId is the post's
  idempotency key, so a client's retry of the same message gets the same task.
- A taskId: A2A continues a task with it. Here a task is one run, and the input a run waiting for
  approval needs is an approver's decision in the queue, not the client's: a message to a task
  that has not ended is refused (its client follows it with SubscribeToTask, GetTask or push
  notifications); one to an ended task is refused as the protocol says (a new message in its
  context is the next turn).

The refusals are the protocol's errors (a2a.utils.errors), never an exception of ours.
"""

import secrets
import uuid
from contextlib import nullcontext

from a2a.types import Message, Role, SendMessageRequest, TaskPushNotificationConfig
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext as _
from google.protobuf.json_format import MessageToDict

from a2a_server.models import PushConfig
from a2a_server.runs import TERMINAL_STATES, run_visible, task_state
from agents.models import Agent
from conversations.end_users import EndUserInvalid, end_user_clean
from conversations.models import Run, RunTrigger
from conversations.selectors import conversation_for_post
from engine.admission import ConversationBusy, IdempotencyKeyReused, conversation_start, message_submit
from platform_site.refusals import InputRefused, LimitReached
from tools.arguments import contains_nul
from workspaces.access import may_start_runs

URL_MAX = 500
NAME_MAX = 200


def _text(message: Message) -> str:
    if message.role != Role.ROLE_USER:
        raise InvalidParamsError(_("The message's role must be ROLE_USER."))
    texts = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(str(MessageToDict(part)["data"]))
        else:
            raise ContentTypeNotSupportedError(
                _("Only text and data parts are taken; send files to the REST API's attachments.")
            )
    text = "\n".join(texts)
    if not text.strip():
        raise InvalidParamsError(_("The message must have a text part that is not empty."))
    if contains_nul(text):
        raise InvalidParamsError(_("The message must not contain the NUL character (U+0000)."))
    if len(text) > settings.AGENTRY_MESSAGE_MAX_CHARS:
        raise InvalidParamsError(
            _("The message must be at most %(count)s characters.") % {"count": settings.AGENTRY_MESSAGE_MAX_CHARS}
        )
    return text


def _end_user(message: Message) -> str:
    value = MessageToDict(message.metadata).get("end_user", "") if message.HasField("metadata") else ""
    if not isinstance(value, str):
        raise InvalidParamsError(_("metadata.end_user must be a string: your id for the end user."))
    try:
        return end_user_clean(value)
    except EndUserInvalid as exc:
        raise InvalidParamsError(str(exc)) from None


def _task_continued(*, user, agent: Agent, message: Message) -> None:
    run = run_visible(user=user, agent_id=agent.pk, task_id=message.task_id)
    if run is None:
        raise TaskNotFoundError
    if task_state(run) in TERMINAL_STATES:
        raise UnsupportedOperationError(
            _("Task %(task)s has ended; send a new message in its context (contextId) to go on.") % {"task": run.pk}
        )
    raise UnsupportedOperationError(
        _(
            "Task %(task)s has not ended: a run waiting for approval goes on when an approver decides in "
            "Agentry's approval queue. Follow it with SubscribeToTask or GetTask."
        )
        % {"task": run.pk}
    )


def push_config_check(config: TaskPushNotificationConfig) -> None:
    if not config.url.startswith(("https://", "http://")) or len(config.url) > URL_MAX:
        raise InvalidParamsError(_("The push notification URL must be an http(s) URL of at most 500 characters."))
    if len(config.id) > NAME_MAX or len(config.token) > NAME_MAX or contains_nul(MessageToDict(config)):
        raise InvalidParamsError(_("The push notification config's id and token must be at most 200 characters."))


def push_config_store(*, run: Run, user, config: TaskPushNotificationConfig) -> PushConfig:
    """The client's config for the run, replacing one of the same id. Without a token, one is
    generated: the client reads it in the answer, and checks the notifications' signature with it."""
    push_config_check(config)
    auth = config.authentication if config.HasField("authentication") else None
    row, _created = PushConfig.objects.update_or_create(
        run=run,
        name=config.id or uuid.uuid4().hex,
        defaults={
            "url": config.url,
            "token": config.token or "a2a_" + secrets.token_urlsafe(32),
            "auth_scheme": auth.scheme[:50] if auth else "",
            "auth_credentials": auth.credentials if auth else "",
            "created_by": user,
        },
    )
    return row


def message_admit(*, user, agent: Agent, request: SendMessageRequest) -> tuple[Run, PushConfig | None]:
    """The run that answers the request's message, and the push config it asked for."""
    if not may_start_runs(user):
        raise InvalidRequestError(_("Your token may not start runs in this workspace."))
    message = request.message
    if message.task_id:
        _task_continued(user=user, agent=agent, message=message)
    content, end_user = _text(message), _end_user(message)
    configuration = request.configuration
    push = (
        configuration.task_push_notification_config if configuration.HasField("task_push_notification_config") else None
    )
    if push is not None:
        push_config_check(push)
    try:
        # With a push config, the config commits with the run: the worker hears its first events.
        with transaction.atomic() if push is not None else nullcontext():
            run = _submitted(user=user, agent=agent, message=message, content=content, end_user=end_user)
            config = None if push is None else push_config_store(run=run, user=user, config=push)
    except LimitReached as exc:
        raise InvalidRequestError(exc.message, data={"retry_after": exc.retry_after}) from None
    except InputRefused as exc:
        raise InvalidParamsError(exc.message) from None
    except ConversationBusy as exc:
        raise UnsupportedOperationError(
            _("The context has an active task %(task)s; wait for it to end.") % {"task": exc.run.pk}
        ) from None
    except IdempotencyKeyReused:
        raise InvalidParamsError(_("This messageId was already sent with other content.")) from None
    return run, config


def _submitted(*, user, agent: Agent, message: Message, content: str, end_user: str) -> Run:
    if not message.context_id:
        return conversation_start(
            agent=agent,
            user=user,
            content=content,
            title=content[:80],
            metadata={"source": "a2a"},
            end_user=end_user,
            trigger=RunTrigger.A2A,
        )
    conversation = conversation_for_post(user=user, conversation_id=message.context_id)
    if conversation is None or conversation.agent_id != agent.pk or not conversation.agent_usable:
        raise InvalidParamsError(
            _("There is no context %(context)r of this agent.") % {"context": message.context_id[:100]}
        )
    return message_submit(
        conversation=conversation,
        content=content,
        user=user,
        idempotency_key=message.message_id[:NAME_MAX],
        trigger=RunTrigger.A2A,
    ).run
