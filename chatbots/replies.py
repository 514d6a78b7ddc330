"""Answers in the chat: a run's answer when it ends, an approval card when it waits for a person,
and a short text saying what a refused message or a button press came to.

A run a chat message started has its ChatEvent; the ledger's run-event listener (`LISTENER`,
registered by ChatbotsConfig.ready) hears its end and its approval requests and sends a task
after the event commits (chatbots.tasks). Each post is the service module's request, sent through
the outbound guard with the webhooks' allowlist (a chat service's API base is typed by an
operator); a refusal the service reports in a 2xx body (`"ok": false`, a non-zero `code` or
`errcode`) is a failed post. What the card dict holds for a module's approval_card_request:
`id`, `request_hash`, `tool`, `arguments`, `text` (the card's words, translated), `approve_label`
and `reject_label`."""

import json

import httpx
from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from chatbots.inbound import channel_secrets
from chatbots.models import ChatEvent
from chatbots.services import SERVICES
from chatbots.services.base import ChatMessage
from conversations.batch import Is, Row, RunEventListener, exists
from conversations.events import TERMINAL_EVENT_TYPES, EventType
from conversations.models import Approval, Run, RunEvent
from conversations.selectors import run_final_answer
from platform_site import outbound
from platform_site.backoff import is_retryable_status
from platform_site.celery import app

# Sent by name: chatbots.tasks wraps this module.
CHAT_REPLY_TASK = "chatbots.tasks.chat_reply_task"
CHAT_NOTICE_TASK = "chatbots.tasks.chat_notice_task"
ERROR_CHARS = 2000
ARGUMENTS_SHOWN_CHARS = 1500


class PostFailed(Exception):
    def __init__(self, message: str, *, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


# An approval's request (its card) and its settlement elsewhere than in the chat (a follow-up).
APPROVAL_EVENT_TYPES = frozenset({EventType.APPROVAL_REQUESTED, EventType.APPROVAL_DECIDED, EventType.APPROVAL_EXPIRED})


def _heard(event: RunEvent) -> None:
    approval_id = event.payload.get("approval_id") if event.type in APPROVAL_EVENT_TYPES else None
    run_id, kind = str(event.run_id), event.type
    transaction.on_commit(lambda: app.tasks[CHAT_REPLY_TASK].delay(run_id, kind, approval_id))


# The ledger asks whether a chat event started the run (its one-to-one row, by the run's id).
LISTENER = RunEventListener(
    event_types=TERMINAL_EVENT_TYPES | APPROVAL_EVENT_TYPES,
    hears=exists(ChatEvent, Is("run_id", Row("id"))),
    written=_heard,
)


def _message(event: ChatEvent) -> ChatMessage:
    return ChatMessage(
        event_id=event.event_id,
        user_id=event.chat_user_id,
        thread_id=event.thread_id,
        text="",
        reply_to=event.reply_to if isinstance(event.reply_to, dict) else {},
    )


def _refused_in_body(text: str) -> str:
    """The error a chat API reports with a 2xx status, or ""."""
    try:
        body = json.loads(text)
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    if body.get("ok") is False:
        return str(body.get("error") or body.get("description") or "ok: false")
    for key in ("code", "errcode"):
        if isinstance(body.get(key), int) and body[key] != 0:
            return f"{key} {body[key]}: {body.get('msg') or body.get('errmsg') or ''}".strip()
    return ""


def chat_send(request: dict) -> None:
    """Send one request a service module built; PostFailed says why it did not land."""
    try:
        fetched = outbound.guarded_request(
            request.get("method", "POST"),
            request["url"],
            headers=request.get("headers") or {},
            params=request.get("params"),
            json=request.get("json"),
            content=request.get("data"),
            timeout_seconds=settings.AGENTRY_WEBHOOK_TIMEOUT_SECONDS,
            max_bytes=64_000,
            follow_redirects=False,
            allowlist=outbound.WEBHOOKS,
        )
    except outbound.OutboundBlocked as exc:
        raise PostFailed(exc.detail, retryable=exc.retryable) from None
    except httpx.HTTPError as exc:
        raise PostFailed(f"{type(exc).__name__}: {exc}", retryable=True) from None
    status = fetched.response.status_code
    if not 200 <= status < 300:
        raise PostFailed(f"HTTP {status}: {fetched.text()[:200]}", retryable=is_retryable_status(status))
    refused = _refused_in_body(fetched.text())
    if refused:
        raise PostFailed(refused, retryable=False)


def _approval_card(approval: Approval) -> dict:
    arguments = json.dumps(approval.arguments, ensure_ascii=False, sort_keys=True)
    if len(arguments) > ARGUMENTS_SHOWN_CHARS:
        arguments = arguments[:ARGUMENTS_SHOWN_CHARS] + "…"
    text = _("The agent asks to call %(tool)s with %(arguments)s.") % {
        "tool": approval.invocation.tool_name,
        "arguments": arguments,
    }
    if settings.AGENTRY_PUBLIC_URL:
        link = settings.AGENTRY_PUBLIC_URL.rstrip("/") + reverse("approvals:detail", args=[approval.pk])
        text += "\n" + _("Details: %(link)s") % {"link": link}
    return {
        "id": approval.pk,
        "request_hash": approval.arguments_hash,
        "tool": approval.invocation.tool_name,
        "arguments": approval.arguments,
        "text": text,
        "approve_label": _("Approve"),
        "reject_label": _("Reject"),
    }


def _settled_text(*, approval_id, run_id) -> str:
    """What the thread is told of an approval settled outside the chat (a press in the chat is
    told by its own notice); "" for one decided in the chat."""
    approval = Approval.objects.select_related("decided_by", "invocation").filter(pk=approval_id, run_id=run_id).first()
    if approval is None or approval.channel == Approval.Channel.CHAT_APP:
        return ""
    tool = approval.invocation.tool_name
    if approval.status == Approval.Status.EXPIRED:
        return _("Nobody decided the call of %(tool)s in time; it was not made.") % {"tool": tool}
    who = approval.decided_by.get_username() if approval.decided_by else _("the system")
    if approval.status == Approval.Status.APPROVED:
        return _("%(user)s approved the call of %(tool)s.") % {"user": who, "tool": tool}
    if approval.status == Approval.Status.REJECTED:
        return _("%(user)s rejected the call of %(tool)s.") % {"user": who, "tool": tool}
    return ""


def _answer_text(run: Run) -> str:
    answer = run_final_answer(run=run)
    if answer is not None and answer.content:
        return answer.content
    return _("The agent could not answer (the run %(status)s: %(reason)s).") % {
        "status": run.get_status_display(),
        "reason": run.stop_reason or "-",
    }


def chat_reply(*, run_id, kind: str, approval_id=None) -> None:
    """Post what the run's event calls for in its chat thread: its answer once it ended (once:
    claimed on the event's row), or the card of the approval it waits for. PostFailed if the
    service did not take it (the task retries what may pass later)."""
    event = ChatEvent.objects.select_related("channel").filter(run_id=run_id).first()
    if event is None:
        return
    channel = event.channel
    service = SERVICES.get(channel.service)
    if service is None:
        return
    secrets, message = channel_secrets(channel), _message(event)
    if kind == EventType.APPROVAL_REQUESTED:
        approval = Approval.objects.select_related("invocation").filter(pk=approval_id, run_id=run_id).first()
        if approval is None or approval.status != Approval.Status.PENDING:
            return
        request = service.approval_card_request(message, _approval_card(approval), secrets, channel.api_base)
        _send_recorded(event, request)
        return
    if kind in APPROVAL_EVENT_TYPES:
        text = _settled_text(approval_id=approval_id, run_id=run_id)
        if text:
            _send_recorded(event, service.reply_request(message, text, secrets, channel.api_base))
        return
    if event.replied_at is not None:
        return
    run = Run.objects.get(pk=run_id)
    request = service.reply_request(message, _answer_text(run), secrets, channel.api_base)
    _send_recorded(event, request)
    ChatEvent.objects.filter(pk=event.pk, replied_at__isnull=True).update(replied_at=timezone.now(), reply_error="")


def chat_notice(*, event_id) -> None:
    """Post the event's detail (why a message started nothing, what a button press came to)."""
    event = ChatEvent.objects.select_related("channel").filter(pk=event_id).first()
    if event is None or not event.detail or event.replied_at is not None:
        return
    service = SERVICES.get(event.channel.service)
    if service is None:
        return
    request = service.reply_request(
        _message(event), event.detail, channel_secrets(event.channel), event.channel.api_base
    )
    _send_recorded(event, request)
    ChatEvent.objects.filter(pk=event.pk).update(replied_at=timezone.now(), reply_error="")


def _send_recorded(event: ChatEvent, request: dict) -> None:
    try:
        chat_send(request)
    except PostFailed as exc:
        ChatEvent.objects.filter(pk=event.pk).update(reply_error=str(exc)[:ERROR_CHARS])
        raise


def chat_notice_after_commit(event: ChatEvent) -> None:
    transaction.on_commit(lambda: app.tasks[CHAT_NOTICE_TASK].delay(event.pk))
