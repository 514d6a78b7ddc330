"""Sending a webhook delivery: one attempt at a time, each an attempt row, retried with backoff.

Agentry's format is a signed POST: receivers verify `X-Agentry-Signature: sha256=<hex>`, an
HMAC-SHA256 with the webhook's secret over `<X-Agentry-Timestamp>.<raw body>`
(platform_site.signatures), and may drop a repeated `X-Agentry-Delivery` id. A chat app's format
posts that app's bot message, signed the app's way (notifications.chat_formats); the email
format mails the same message as plain text to the webhook's addresses, each try an attempt
row, retried like a POST.
"""

import json
import time

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from notifications import chat_formats
from notifications.models import Webhook, WebhookAttempt, WebhookDelivery
from platform_site import outbound
from platform_site.backoff import backoff_delay, is_retryable_status, parse_retry_after
from platform_site.crypto import SecretDecryptionError
from platform_site.signatures import webhook_signature
from workspaces.membership import approver_emails

RESPONSE_EXCERPT_CHARS = 2000
# The events about an approval: its request, its escalation, its decision or expiry.
APPROVAL_EVENT_TYPES = (
    chat_formats.APPROVAL_REQUESTED,
    chat_formats.APPROVAL_ESCALATED,
    *chat_formats.APPROVAL_SETTLED,
)
RESPONSE_EXCERPT_BYTES = 4 * RESPONSE_EXCERPT_CHARS  # enough for the excerpt in any UTF-8 text


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
    recipients = _email_recipients(delivery)
    if not recipients:
        return None, "", _("None of the addresses is a member who may decide this workspace's approvals."), False, None
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, recipients)
    except Exception as exc:
        return None, "", f"{type(exc).__name__}: {exc}"[:RESPONSE_EXCERPT_CHARS], True, None
    return None, "", "", False, None


def _email_recipients(delivery: WebhookDelivery) -> list[str]:
    """The webhook's addresses; for an approval, only those of the members of the run's agent's
    workspace who may decide its approvals: a request (its tool, its arguments) is not mailed to
    another team or to someone who only reads."""
    recipients = delivery.webhook.recipients
    if delivery.event_type not in APPROVAL_EVENT_TYPES:
        return recipients
    approvers = approver_emails(workspace_id=delivery.webhook.agent.workspace_id)
    return [address for address in recipients if address.lower() in approvers]


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
