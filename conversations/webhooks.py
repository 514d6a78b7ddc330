"""Webhooks: signed POSTs of run outcomes, approval requests and alerts, one row per attempt.

A delivery row is written in the same transaction as the event it reports, and the task that
sends it is enqueued after commit, so an event that happened is never left unreported.
Receivers verify `X-Agentry-Signature: sha256=<hex>`, an HMAC-SHA256 with the webhook's secret
over `<X-Agentry-Timestamp>.<raw body>`, and may drop a repeated `X-Agentry-Delivery` id.

A webhook in a chat app's format (conversations.chat_formats) gets that app's bot message
instead, signed the app's way, and also hears approval decisions (as follow-ups to the request
message: a bot cannot edit what it sent); a webhook in Agentry's format hears what it always did.
A webhook marked as an escalation channel hears only approvals that waited past the agent's
escalation time (engine.approvals.approvals_escalate), and their decisions if it is a chat app's.
A webhook in the email format is a chat format whose "bot" is a list of addresses: the same
message as plain text, each try an attempt row, retried like a POST.
"""

import hashlib
import hmac
import json
import secrets
import time

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.db import connection, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from conversations import chat_formats
from conversations.events import EventType
from conversations.models import ALERT_EVENT_TYPES, Approval, Run, RunEvent, Webhook, WebhookAttempt, WebhookDelivery
from conversations.selectors import run_final_answer
from conversations.usage import usage_values
from platform_site import outbound
from platform_site.backoff import backoff_delay, is_retryable_status, parse_retry_after
from platform_site.celery import app
from platform_site.crypto import SecretDecryptionError

# Sent by name: conversations.tasks wraps this module's webhook_attempt, so this module cannot
# import it (ConversationsConfig.ready registers the task in every process).
WEBHOOK_DELIVER_TASK = "conversations.tasks.webhook_deliver_task"
RESPONSE_EXCERPT_CHARS = 2000
RESPONSE_EXCERPT_BYTES = 4 * RESPONSE_EXCERPT_CHARS  # enough for the excerpt in any UTF-8 text


def webhook_secret_generate() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def webhook_signature(*, secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def _payload(event: RunEvent, run: Run) -> dict:
    answer = run_final_answer(run=run)
    return {
        "type": event.type,
        "created_at": event.created_at.isoformat(),
        "event": {"seq": event.seq, "payload": event.payload},
        "run": {
            "id": str(run.pk),
            "conversation": str(run.conversation_id),
            "agent": run.agent.slug,
            "status": run.status,
            "stop_reason": run.stop_reason,
            "output": answer.content if answer is not None else None,
            "usage": usage_values(run),
            "cost": str(run.cost),
        },
    }


# Whether an active webhook hears the run's events (its one parameter: the run's id), in one read
# through the run. Plain SQL: it is asked at the end of every run, and building it through the
# ORM cost more than the read.
WEBHOOKS_LISTENING_SQL = (
    f'SELECT EXISTS (SELECT 1 FROM "{Webhook._meta.db_table}" w JOIN "{Run._meta.db_table}" r '
    'ON w."agent_id" = r."agent_id" AND (w."conversation_id" IS NULL OR w."conversation_id" = r."conversation_id") '
    'WHERE r."id" = %s AND w."is_active") AS "listening"'
)


def webhooks_listening(*, run_id) -> bool:
    """Whether an active webhook hears the run's events. Asked while a terminal or approval
    event's batch is built (unless the step before read it with its own commit), so that a run
    with no webhook (the usual case) writes its event in one statement with no transaction around
    it; a webhook saved while that batch is being written hears the run's later events."""
    with connection.cursor() as cursor:
        cursor.execute(WEBHOOKS_LISTENING_SQL, [Run._meta.pk.get_db_prep_value(run_id, connection)])
        return bool(cursor.fetchone()[0])


def webhook_deliveries_create(*, event: RunEvent) -> list[WebhookDelivery]:
    """In the event's transaction: one delivery per matching webhook, sent after commit."""
    run = Run.objects.select_related("agent").get(pk=event.run_id)
    hooks = list(
        Webhook.objects.filter(agent_id=run.agent_id, is_active=True).filter(
            Q(conversation__isnull=True) | Q(conversation_id=run.conversation_id)
        )
    )
    if not hooks:
        return []
    payload = _payload(event, run)
    deliveries = [
        WebhookDelivery.objects.create(webhook=hook, run_event=event, event_type=event.type, payload=payload)
        for hook in hooks
        if _hears(hook, event.type, payload)
    ]
    _deliveries_send_after_commit(deliveries)
    return deliveries


def _hears(hook: Webhook, event_type: str, payload: dict) -> bool:
    """An escalation channel hears escalations only (a chat one also the decisions that follow
    them), and no other webhook hears them. Otherwise Agentry's format keeps its events
    (decisions are not among them); a chat format hears every event it has a message for."""
    if hook.escalation:
        return _escalation_hears(hook, event_type, payload)
    if event_type == EventType.APPROVAL_ESCALATED:
        return False
    if hook.format == Webhook.Format.AGENTRY:
        return event_type not in chat_formats.APPROVAL_SETTLED
    return chat_formats.chat_message(event_type=event_type, payload=payload) is not None


def _escalation_hears(hook: Webhook, event_type: str, payload: dict) -> bool:
    if event_type == EventType.APPROVAL_ESCALATED:
        return True
    if hook.format == Webhook.Format.AGENTRY or event_type not in chat_formats.APPROVAL_SETTLED:
        return False
    if chat_formats.chat_message(event_type=event_type, payload=payload) is None:
        return False
    # The follow-up of a card this channel showed: only for an approval that was escalated.
    approval_id = payload["event"]["payload"]["approval_id"]
    return Approval.objects.filter(pk=approval_id, escalated_at__isnull=False).exists()


def _deliveries_send_after_commit(deliveries: list[WebhookDelivery]) -> None:
    for delivery in deliveries:
        transaction.on_commit(lambda pk=str(delivery.pk): app.tasks[WEBHOOK_DELIVER_TASK].delay(pk))


def webhook_redeliver(*, delivery_ids) -> int:
    """Failed deliveries back to pending, each sent again after commit: its next attempt is
    numbered after the earlier ones and gets its own row, and a network error or a 5xx is retried
    while AGENTRY_WEBHOOK_MAX_ATTEMPTS allows (past it, the one attempt only). Returns how many;
    a delivery that is pending or delivered is left alone."""
    with transaction.atomic():
        failed = WebhookDelivery.objects.filter(pk__in=delivery_ids, status=WebhookDelivery.Status.FAILED)
        deliveries = list(failed.select_for_update().only("pk"))
        WebhookDelivery.objects.filter(pk__in=[d.pk for d in deliveries]).update(
            status=WebhookDelivery.Status.PENDING, finished_at=None
        )
        _deliveries_send_after_commit(deliveries)
    return len(deliveries)


def webhook_alert_deliveries_create(*, event_type: str, payload: dict, agent_id: int | None) -> list[WebhookDelivery]:
    """In the alert's transaction: one delivery per active webhook subscribed to alerts, sent
    after commit. An alert on one agent goes to that agent's subscribed webhooks; an alert on a
    model config or on everything concerns every agent, so it goes to all subscribed webhooks."""
    if event_type not in ALERT_EVENT_TYPES:
        raise ValueError(f"not an alert event type: {event_type}")
    hooks = Webhook.objects.filter(is_active=True, receives_alerts=True)
    if agent_id is not None:
        hooks = hooks.filter(agent_id=agent_id)
    deliveries = [
        WebhookDelivery.objects.create(webhook=hook, event_type=event_type, payload=payload) for hook in hooks
    ]
    _deliveries_send_after_commit(deliveries)
    return deliveries


def _retry_delay(attempt: int, retry_after: float | None) -> float:
    return backoff_delay(
        attempt,
        base=settings.AGENTRY_WEBHOOK_RETRY_BASE_SECONDS,
        cap=settings.AGENTRY_WEBHOOK_RETRY_MAX_SECONDS,
        retry_after=retry_after,
    )


def _approval_link(payload: dict) -> str:
    approval_id = payload.get("event", {}).get("payload", {}).get("approval_id")
    return "" if approval_id is None else approval_url(approval_id=approval_id)


def approval_url(*, approval_id) -> str:
    """The approval's page, absolute; empty without AGENTRY_PUBLIC_URL (a chat message or an
    email then has no link). The page asks for a login and decides nothing by being opened."""
    base = settings.AGENTRY_PUBLIC_URL
    if not base:
        return ""
    return base.rstrip("/") + reverse("approvals:detail", args=[approval_id])


Outcome = tuple[int | None, str, str, bool, float | None]  # status, excerpt, error, retryable, retry-after


def _send(delivery: WebhookDelivery, body: bytes) -> Outcome:
    """One POST in Agentry's format: the body, signed with the webhook's secret."""
    try:
        secret = delivery.webhook.secret
    except SecretDecryptionError as exc:
        return None, "", str(exc), False, None
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Agentry-Webhooks/1",
        "X-Agentry-Event": delivery.event_type,
        "X-Agentry-Delivery": str(delivery.pk),
        "X-Agentry-Timestamp": timestamp,
        "X-Agentry-Signature": webhook_signature(secret=secret, timestamp=timestamp, body=body),
    }
    outcome, _text = _post(delivery.webhook.url, body, headers)
    return outcome


def _chat_send(delivery: WebhookDelivery) -> Outcome:
    """One POST in a chat app's format: that app's message, signed the app's way when the bot
    has a signing secret. A refusal the app reports in a 2xx body is a failed attempt."""
    hook = delivery.webhook
    if not chat_formats.host_allowed(fmt=hook.format, url=hook.url, allowlist=settings.AGENTRY_WEBHOOK_ALLOWLIST):
        # The admin refuses such a URL; a row changed elsewhere is refused here too, for good.
        return None, "", _("The URL is not on this chat app's host."), False, None
    try:
        secret = hook.bot_secret
    except SecretDecryptionError as exc:
        return None, "", str(exc), False, None
    message = chat_formats.chat_message(
        event_type=delivery.event_type, payload=delivery.payload, link=_approval_link(delivery.payload)
    )
    url, body = chat_formats.chat_request(
        fmt=hook.format, url=hook.url, message=message, secret=secret, now=time.time()
    )
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "Agentry-Webhooks/1"}
    outcome, text = _post(url, body, headers)
    status, excerpt, error = outcome[0], outcome[1], outcome[2]
    if status is not None and not error:
        refused = chat_formats.chat_response_error(fmt=hook.format, text=text)
        if refused:
            return status, excerpt, refused[0], refused[1], None
    return outcome


def _email_send(delivery: WebhookDelivery) -> Outcome:
    """One email in the email format: the chat message as plain text to the webhook's addresses.
    Any failure of the mail backend is retryable: an SMTP server that is down may come back."""
    message = chat_formats.chat_message(
        event_type=delivery.event_type, payload=delivery.payload, link=_approval_link(delivery.payload)
    )
    subject, body = chat_formats.email_text(message)
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, delivery.webhook.recipients)
    except Exception as exc:
        return None, "", f"{type(exc).__name__}: {exc}"[:RESPONSE_EXCERPT_CHARS], True, None
    return None, "", "", False, None


def _post(url: str, body: bytes, headers: dict) -> tuple[Outcome, str]:
    """(outcome, the answer's text as far as it was read) of one POST."""
    try:
        # Through the outbound guard like a tool's request, with its own allowlist: a receiver on
        # an internal address must be listed in AGENTRY_WEBHOOK_ALLOWLIST. A redirect is not
        # followed (the receiver's URL is the one configured) and reads as a failed attempt.
        fetched = outbound.guarded_request(
            "POST",
            url,
            content=body,
            headers=headers,
            timeout_seconds=settings.AGENTRY_WEBHOOK_TIMEOUT_SECONDS,
            max_bytes=RESPONSE_EXCERPT_BYTES,
            follow_redirects=False,
            allowlist=outbound.WEBHOOKS,
        )
    except outbound.OutboundBlocked as exc:
        # A target refused by configuration stays refused; a name that did not resolve is a
        # network error like a refused connection, and may resolve on a later attempt.
        return (None, "", exc.detail, exc.retryable, None), ""
    except httpx.HTTPError as exc:
        return (None, "", f"{type(exc).__name__}: {exc}", True, None), ""
    response = fetched.response
    status = response.status_code
    text = fetched.text()
    excerpt = text[:RESPONSE_EXCERPT_CHARS]
    if 200 <= status < 300:
        return (status, excerpt, "", False, None), text
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    return (status, excerpt, f"HTTP {status}", is_retryable_status(status), retry_after), text


def webhook_attempt(*, delivery_id) -> float | None:
    """Make the next attempt of a pending delivery. Returns seconds until the next attempt,
    or None when the delivery is settled (delivered, failed for good, or taken by another worker)."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None or delivery.status != WebhookDelivery.Status.PENDING:
        return None
    number = delivery.attempts + 1
    # Claiming the attempt number first means a duplicated task cannot send the same attempt twice.
    if not WebhookDelivery.objects.filter(
        pk=delivery.pk, status=WebhookDelivery.Status.PENDING, attempts=delivery.attempts
    ).update(attempts=number):
        return None
    started = time.monotonic()
    if delivery.webhook.format == Webhook.Format.AGENTRY:
        body = json.dumps({"id": str(delivery.pk), **delivery.payload}, ensure_ascii=False, separators=(",", ":"))
        status, excerpt, error, retryable, retry_after = _send(delivery, body.encode())
    elif delivery.webhook.format == Webhook.Format.EMAIL:
        status, excerpt, error, retryable, retry_after = _email_send(delivery)
    else:
        status, excerpt, error, retryable, retry_after = _chat_send(delivery)
    will_retry = bool(error) and retryable and number < settings.AGENTRY_WEBHOOK_MAX_ATTEMPTS
    with transaction.atomic():
        WebhookAttempt.objects.create(
            delivery=delivery,
            number=number,
            http_status=status,
            response_body=excerpt,
            error=error,
            duration_ms=int((time.monotonic() - started) * 1000),
            will_retry=will_retry,
        )
        if not error:
            outcome = WebhookDelivery.Status.DELIVERED
        elif will_retry:
            return _retry_delay(number, retry_after)
        else:
            outcome = WebhookDelivery.Status.FAILED
        WebhookDelivery.objects.filter(pk=delivery.pk).update(status=outcome, finished_at=timezone.now())
    return None
