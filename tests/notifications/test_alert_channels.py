"""A firing and its resolution are posted, signed, to the webhooks subscribed to alerts (one
delivery row and one attempt row each, like a run's events) and emailed after commit; a mail
server that fails is logged, never raised."""

import hashlib
import hmac
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.models import AlertFiring
from alerts.services import alert_rules_evaluate
from conversations.models import Approval, Run
from notifications.models import Webhook, WebhookDelivery
from notifications.sending import webhook_attempt
from tests.alerts.conftest import make_rule, pending_approval
from tests.support.api_server import WebhookReceiver
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db
SECRET = "whsec_alerts-test"


@pytest.fixture
def receiver():
    server = WebhookReceiver()
    yield server
    server.stop()


def _evaluate(capture, now):
    with capture(execute=True):
        return alert_rules_evaluate(now=now)


def _verify(request, secret: str) -> dict:
    headers, body = request["headers"], request["body"]
    expected = hmac.new(secret.encode(), headers["x-agentry-timestamp"].encode() + b"." + body, hashlib.sha256)
    assert headers["x-agentry-signature"] == "sha256=" + expected.hexdigest()
    return json.loads(body)


def test_firing_and_resolution_are_posted_signed_to_subscribed_webhooks(
    receiver, sent_deliveries, django_capture_on_commit_callbacks
):
    now = timezone.now()
    agent, other = make_agent(), make_agent()
    hook = Webhook.objects.create(agent=agent, url=receiver.url, secret=SECRET, receives_alerts=True)
    Webhook.objects.create(agent=agent, url=receiver.url + "/runs-only", secret=SECRET)  # not subscribed
    Webhook.objects.create(agent=other, url=receiver.url + "/other", secret=SECRET, receives_alerts=True)
    rule = make_rule(kind="approval_age", agent=agent, threshold=5)
    approval = pending_approval(agent, created_at=now - timedelta(minutes=8))

    _evaluate(django_capture_on_commit_callbacks, now)
    [delivery] = WebhookDelivery.objects.all()
    assert delivery.webhook == hook and delivery.run_event is None and delivery.event_type == "alert.firing"
    assert sent_deliveries == [str(delivery.pk)]
    webhook_attempt(delivery_id=delivery.pk)

    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.attempt_rows.get().http_status == 200
    [request] = receiver.requests
    assert request["headers"]["x-agentry-event"] == "alert.firing"
    payload = _verify(request, SECRET)
    firing = AlertFiring.objects.get(rule=rule)
    assert payload["id"] == str(delivery.pk) and payload["type"] == "alert.firing"
    assert payload["alert"]["firing_id"] == firing.pk and payload["alert"]["rule"]["agent"] == agent.slug
    assert payload["alert"]["value"] == "8" and payload["alert"]["threshold"] == "5"
    assert payload["alert"]["resolved_at"] is None and payload["alert"]["rule"]["kind"] == "approval_age"

    Approval.objects.filter(pk=approval.pk).update(status="rejected")
    _evaluate(django_capture_on_commit_callbacks, now + timedelta(minutes=1))
    resolved = WebhookDelivery.objects.get(event_type="alert.resolved")
    webhook_attempt(delivery_id=resolved.pk)
    payload = _verify(receiver.requests[1], SECRET)
    assert payload["type"] == "alert.resolved" and payload["alert"]["resolved_value"] == "0"
    assert payload["alert"]["resolved_at"] is not None
    assert WebhookDelivery.objects.count() == 2


def test_a_rule_on_everything_reaches_every_subscribed_webhook_and_one_without_webhooks_none(
    receiver, sent_deliveries, django_capture_on_commit_callbacks
):
    now = timezone.now()
    first, second = make_agent(), make_agent()
    Webhook.objects.create(agent=first, url=receiver.url, secret=SECRET, receives_alerts=True)
    Webhook.objects.create(agent=second, url=receiver.url, secret=SECRET, receives_alerts=True)
    Webhook.objects.create(agent=second, url=receiver.url, secret=SECRET, receives_alerts=True, is_active=False)
    make_rule(kind="approval_age", threshold=5)
    make_rule(kind="approval_age", name="quiet", threshold=5, send_webhooks=False)
    pending_approval(first, created_at=now - timedelta(minutes=8))

    _evaluate(django_capture_on_commit_callbacks, now)
    assert AlertFiring.objects.count() == 2
    assert sorted(WebhookDelivery.objects.values_list("webhook__agent", flat=True)) == sorted([first.pk, second.pk])
    assert len(sent_deliveries) == 2


def test_firing_and_resolution_are_emailed_to_the_rule_s_addresses(
    mailoutbox, sent_deliveries, django_capture_on_commit_callbacks
):
    now = timezone.now()
    agent = make_agent(name="Billing bot")
    rule = make_rule(
        kind="stuck_runs", name="Billing stuck", agent=agent, threshold=10, email_to="a@example.com,\nb@example.com"
    )
    stuck = ledger_run(agent, status="queued", stop_reason="", created_at=now - timedelta(minutes=30))

    _evaluate(django_capture_on_commit_callbacks, now)
    [fired] = mailoutbox
    assert fired.to == ["a@example.com", "b@example.com"] and "Billing stuck is firing" in fired.subject
    assert "1 run unfinished after 10 min" in fired.body and "agent Billing bot" in fired.body

    Run.objects.filter(pk=stuck.pk).update(status="cancelled")
    _evaluate(django_capture_on_commit_callbacks, now)
    assert len(mailoutbox) == 2 and "Billing stuck resolved" in mailoutbox[1].subject
    assert AlertFiring.objects.get(rule=rule).resolved_at == now


def test_a_failing_mail_server_is_logged_and_the_firing_kept(
    settings, caplog, sent_deliveries, django_capture_on_commit_callbacks
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2  # nothing listens
    now = timezone.now()
    rule = make_rule(kind="approval_age", threshold=1, email_to="oncall@example.com")
    pending_approval(make_agent(), created_at=now - timedelta(minutes=5))

    counts = _evaluate(django_capture_on_commit_callbacks, now)
    assert counts["fired"] == 1 and AlertFiring.objects.filter(rule=rule, resolved_at__isnull=True).exists()
    assert "alert email to oncall@example.com failed" in caplog.text
