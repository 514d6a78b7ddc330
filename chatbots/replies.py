"""Answers in the chat: a run's answer when it ends, an approval card when it waits for a person,
and a short text saying what a refused message or a button press came to.

A run a chat message started has its ChatEvent; the ledger's run-event listener (`LISTENER`,
registered by ChatbotsConfig.ready) hears its end and its approval requests and sends a task
after the event commits (chatbots.tasks). Each post is the service module's request, sent through
the outbound guard with the webhooks' allowlist (a chat service's API base is typed by an
operator); a refusal the service reports in a 2xx body (`"ok": false`, a non-zero `code` or
`errcode`) is a failed post. A service whose API wants an access token (its module has
`token_request`: Feishu's tenant token, WeCom's gettoken, DingTalk's robot API) gets one fetched
the same way when a request asks for `secrets["access_token"]`, cached (Django's cache, by
channel) until shortly before it expires; an answer saying the token expired (an expired-token
code, or DingTalk's 401) replaces it with a new one and the post is tried once more.

An answer the model streams (its text delta events) is posted early where the service lets a bot
edit its message (the module has `update_request`: Slack's chat.update, Telegram's
editMessageText) and edited as text arrives: `STREAM_LISTENER` hears the deltas and sends
chat_stream_task at most once per AGENTRY_CHAT_STREAM_EDIT_SECONDS per run; the task posts (or
edits) the text streamed so far by the run's latest model call, and the run's end edits the
message into the whole answer. Other services (Feishu posts text, DingTalk, WeCom) post once.
The event's row is locked while its message is posted or edited, so a late edit never overwrites
the final answer nor posts a second message; the run never waits on any of it.

What the card dict holds for a module's approval_card_request: `id`, `request_hash`, `tool`,
`arguments`, `text` (the card's words, translated), `approve_label` and `reject_label`."""

import hashlib
import json
from collections.abc import Callable

import httpx
from django.conf import settings
from django.core.cache import cache
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
CHAT_STREAM_TASK = "chatbots.tasks.chat_stream_task"
ERROR_CHARS = 2000
ARGUMENTS_SHOWN_CHARS = 1500
# A token is dropped this long before the service says it expires.
TOKEN_MARGIN_SECONDS = 300
# The codes a 2xx answer (or DingTalk's 401) gives for an access token expired or revoked: Feishu's
# invalid / expired tenant token, WeCom's invalid / expired access_token.
EXPIRED_TOKEN_CODES = frozenset({99991663, 99991677, 40014, 42001})


class PostFailed(Exception):
    def __init__(self, message: str, *, retryable: bool, code=None, status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.code = code
        self.status = status

    @property
    def token_expired(self) -> bool:
        return self.code in EXPIRED_TOKEN_CODES or self.status == 401


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


def _delta_heard(event: RunEvent) -> None:
    seconds = settings.AGENTRY_CHAT_STREAM_EDIT_SECONDS
    if seconds <= 0:
        return
    run_id = str(event.run_id)
    # The first delta of a window sends the edit; the rest of the window's deltas are shown by the next.
    if cache.add(f"chatbots:stream:{run_id}", 1, timeout=seconds):
        transaction.on_commit(lambda: app.tasks[CHAT_STREAM_TASK].delay(run_id))


STREAM_LISTENER = RunEventListener(
    event_types=frozenset({EventType.MESSAGE_DELTA}),
    hears=exists(ChatEvent, Is("run_id", Row("id"))),
    written=_delta_heard,
)


def _message(event: ChatEvent) -> ChatMessage:
    return ChatMessage(
        event_id=event.event_id,
        user_id=event.chat_user_id,
        thread_id=event.thread_id,
        text="",
        reply_to=event.reply_to if isinstance(event.reply_to, dict) else {},
    )


def _refused_in_body(text: str) -> tuple[str, int | None]:
    """The error a chat API reports in its body (with a 2xx status, or beside an error status) and
    its numeric code, or ("", None)."""
    try:
        body = json.loads(text)
    except ValueError:
        return "", None
    if not isinstance(body, dict):
        return "", None
    if body.get("ok") is False:
        return str(body.get("error") or body.get("description") or "ok: false"), None
    for key in ("code", "errcode"):
        if isinstance(body.get(key), int) and body[key] != 0:
            return f"{key} {body[key]}: {body.get('msg') or body.get('errmsg') or ''}".strip(), body[key]
    return "", None


def chat_send(request: dict) -> dict:
    """Send one request a service module built and return its JSON answer ({} when it has none);
    PostFailed says why it did not land."""
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
    status, text = fetched.response.status_code, fetched.text()
    refused, code = _refused_in_body(text)
    if not 200 <= status < 300:
        retryable = is_retryable_status(status)
        raise PostFailed(f"HTTP {status}: {text[:200]}", retryable=retryable, code=code, status=status)
    if refused:
        raise PostFailed(refused, retryable=False, code=code)
    try:
        answer = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def chat_fetch(request: dict) -> bytes:
    """Download the file one request a service module built names: its bytes, read up to one past
    the attachment size limit (attachment_store refuses a larger file). PostFailed when the
    service did not give it (an error status, or an error in a JSON body)."""
    try:
        fetched = outbound.guarded_request(
            request.get("method", "GET"),
            request["url"],
            headers=request.get("headers") or {},
            params=request.get("params"),
            json=request.get("json"),
            timeout_seconds=settings.AGENTRY_WEBHOOK_TIMEOUT_SECONDS,
            max_bytes=settings.AGENTRY_ATTACHMENT_MAX_BYTES + 1,
            follow_redirects=False,
            allowlist=outbound.WEBHOOKS,
        )
    except outbound.OutboundBlocked as exc:
        raise PostFailed(exc.detail, retryable=exc.retryable) from None
    except httpx.HTTPError as exc:
        raise PostFailed(f"{type(exc).__name__}: {exc}", retryable=True) from None
    status = fetched.response.status_code
    if not 200 <= status < 300:
        raise PostFailed(f"HTTP {status}", retryable=is_retryable_status(status), status=status)
    if fetched.response.headers.get("content-type", "").startswith(("application/json", "text/plain")):
        refused, code = _refused_in_body(fetched.text())
        if refused:
            raise PostFailed(refused, retryable=False, code=code)
    return fetched.body


def _token_key(channel, request: dict) -> str:
    # By channel, and by the credentials asked with: new credentials are not answered with an old token.
    asked = hashlib.sha256(json.dumps([request.get("url"), request.get("json")], sort_keys=True).encode())
    return f"chatbots:token:{channel.pk}:{asked.hexdigest()[:16]}"


def _access_token(channel, service, secrets: dict, *, renew: bool = False) -> str:
    request = service.token_request(secrets, channel.api_base)
    key = _token_key(channel, request)
    token = None if renew else cache.get(key)
    if token:
        return token
    try:
        token, expires_in = service.token_from_answer(chat_send(request))
    except ValueError as exc:
        raise PostFailed(str(exc), retryable=False) from None
    cache.set(key, token, timeout=max(int(expires_in) - TOKEN_MARGIN_SECONDS, 1))
    return token


class _Secrets(dict):
    """The channel's secrets; `access_token`, when a request asks for it, fetched (or cached)."""

    def __init__(self, secrets: dict, fetch: Callable[[], str] | None):
        super().__init__(secrets)
        self.fetch = fetch

    def __missing__(self, key):
        if key != "access_token" or self.fetch is None:
            raise KeyError(key)
        self[key] = token = self.fetch()
        return token


def _post(channel, service, build: Callable[[dict], dict], send: Callable[[dict], object] = chat_send):
    """Send the request `build(secrets)` makes, with an access token when it asks for one."""
    secrets = channel_secrets(channel)
    if not hasattr(service, "token_request"):
        return send(build(secrets))
    with_token = _Secrets(secrets, lambda: _access_token(channel, service, secrets))
    try:
        return send(build(with_token))
    except PostFailed as exc:
        if "access_token" not in with_token or not exc.token_expired:
            raise
    renewed = _Secrets(secrets, lambda: _access_token(channel, service, secrets, renew=True))
    return send(build(renewed))


def chat_file_bytes(channel, service, message: ChatMessage, file: dict) -> bytes:
    """The bytes of one of the message's files, fetched as its service documents it: one request
    (`file_request`), or two when the first answers where the file is (`file_download_request`,
    Telegram's getFile, DingTalk's download URL). A request the module cannot build (a file URL
    outside the service) is a ValueError."""
    api_base = channel.api_base
    if not hasattr(service, "file_download_request"):
        return _post(
            channel, service, lambda secrets: service.file_request(message, file, secrets, api_base), chat_fetch
        )
    answer = _post(channel, service, lambda secrets: service.file_request(message, file, secrets, api_base))
    return _post(
        channel, service, lambda secrets: service.file_download_request(answer, file, secrets, api_base), chat_fetch
    )


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
    message = _message(event)
    if kind == EventType.APPROVAL_REQUESTED:
        approval = Approval.objects.select_related("invocation").filter(pk=approval_id, run_id=run_id).first()
        if approval is None or approval.status != Approval.Status.PENDING:
            return
        card = _approval_card(approval)
        _send_recorded(event, lambda secrets: service.approval_card_request(message, card, secrets, channel.api_base))
        # What streams after the card (once decided) is a new message below it, not an edit above it.
        ChatEvent.objects.filter(pk=event.pk).update(posted={})
        return
    if kind in APPROVAL_EVENT_TYPES:
        text = _settled_text(approval_id=approval_id, run_id=run_id)
        if text:
            _send_recorded(event, lambda secrets: service.reply_request(message, text, secrets, channel.api_base))
        return
    answer = _answer_text(Run.objects.get(pk=run_id))
    try:
        with transaction.atomic():
            # Waits for an edit being sent: the answer then replaces it, and nothing is posted twice.
            event = ChatEvent.objects.select_for_update(of=("self",)).select_related("channel").get(pk=event.pk)
            if event.replied_at is not None:
                return
            _answer_post(event, service, message, answer)
            ChatEvent.objects.filter(pk=event.pk).update(replied_at=timezone.now(), reply_error="", posted=event.posted)
    except PostFailed as exc:
        ChatEvent.objects.filter(pk=event.pk).update(reply_error=str(exc)[:ERROR_CHARS])
        raise


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _answer_post(event: ChatEvent, service, message: ChatMessage, text: str) -> None:
    """Post `text` as the run's answer, or edit the message it was first posted as; `event.posted`
    is left naming that message and the text it shows."""
    channel = event.channel
    posted = event.posted if isinstance(event.posted, dict) else {}
    if posted.get("message") and hasattr(service, "update_request"):
        if posted.get("digest") != _digest(text):  # an unchanged text is not sent again (Telegram refuses it)
            _send_recorded(
                event, lambda secrets: service.update_request(posted["message"], text, secrets, channel.api_base)
            )
        event.posted = {**posted, "digest": _digest(text)}
        return
    answer = _send_recorded(event, lambda secrets: service.reply_request(message, text, secrets, channel.api_base))
    found = service.posted_from_answer(answer, message) if hasattr(service, "posted_from_answer") else None
    event.posted = {"message": found, "digest": _digest(text)} if found else {}


def _streamed_text(run_id) -> str:
    """The text the run's latest model call has streamed so far."""
    found = RunEvent.objects.filter(run_id=run_id, type=EventType.MESSAGE_DELTA).order_by("seq")
    deltas = list(found.values_list("payload", flat=True))
    if not deltas:
        return ""
    latest = deltas[-1].get("llm_call_id")
    return "".join(str(d.get("text", "")) for d in deltas if d.get("llm_call_id") == latest)


def chat_stream(*, run_id) -> None:
    """Post the answer streamed so far, or edit the message it was posted as. Nothing once the
    answer is posted whole, nor while another post of the event is being sent (the next delta's
    task, or the final answer, shows this text)."""
    with transaction.atomic():
        event = (
            ChatEvent.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("channel")
            .filter(run_id=run_id, replied_at__isnull=True)
            .first()
        )
        if event is None:
            return
        service = SERVICES.get(event.channel.service)
        if service is None or not hasattr(service, "update_request"):
            return
        text = _streamed_text(run_id).strip()
        if not text:
            return
        _answer_post(event, service, _message(event), text)
        ChatEvent.objects.filter(pk=event.pk).update(posted=event.posted, reply_error="")


def chat_notice(*, event_id) -> None:
    """Post the event's detail (why a message started nothing, what a button press came to)."""
    event = ChatEvent.objects.select_related("channel").filter(pk=event_id).first()
    if event is None or not event.detail or event.replied_at is not None:
        return
    channel = event.channel
    service = SERVICES.get(channel.service)
    if service is None:
        return
    message = _message(event)
    _send_recorded(event, lambda secrets: service.reply_request(message, event.detail, secrets, channel.api_base))
    ChatEvent.objects.filter(pk=event.pk).update(replied_at=timezone.now(), reply_error="")


def _send_recorded(event: ChatEvent, build: Callable[[dict], dict]) -> dict:
    try:
        return _post(event.channel, SERVICES[event.channel.service], build)
    except PostFailed as exc:
        ChatEvent.objects.filter(pk=event.pk).update(reply_error=str(exc)[:ERROR_CHARS])
        raise


def chat_notice_after_commit(event: ChatEvent) -> None:
    transaction.on_commit(lambda: app.tasks[CHAT_NOTICE_TASK].delay(event.pk))
