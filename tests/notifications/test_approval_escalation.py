"""Escalation of approvals nobody decided in time: on a real parked run, with a controlled `now`,
the escalation pass tells the escalation channels once (a Feishu card, signed, at a local
receiver; signed JSON to an Agentry-format one; a plain-text email from an email-format one,
recorded and retried like a POST), ordinary webhooks never hear it, escalation webhooks never
hear the ordinary request, and a decided approval or an agent without an escalation time is
never escalated."""

import hashlib
import hmac
import json
import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.mail.backends.base import BaseEmailBackend
from django.db import connection
from django.utils import timezone

from agents.models import Agent
from conversations.models import Approval, RunEvent
from engine.approvals import approval_decide, approvals_escalate
from engine.tasks import approvals_expire_task
from notifications.models import Webhook, WebhookAttempt, WebhookDelivery
from notifications.sending import webhook_attempt
from tests.notifications.test_chat_webhooks import BOT_SECRET, PUBLIC_URL, ChatReceiver
from tests.support.api_server import WebhookReceiver
from tests.support.factories import make_agent
from tests.support.runs import advance, start_run
from workspaces.membership import membership_set
from workspaces.roles import Role

ESCALATE_AFTER = 30
INJECTION = '<a href="https://evil.example">click</a> @all'
ESCALATION_EMAILS = "ops@example.com,\nlead@example.com"


@pytest.fixture
def receivers(settings):
    settings.AGENTRY_WEBHOOK_ALLOWLIST = ["127.0.0.1"]
    settings.AGENTRY_PUBLIC_URL = PUBLIC_URL
    ordinary, escalation, agentry = ChatReceiver("feishu"), ChatReceiver("feishu"), WebhookReceiver()
    yield ordinary, escalation, agentry
    for receiver in (ordinary, escalation, agentry):
        receiver.stop()


@pytest.fixture
def parked(scripted_agent, receivers):
    """A run waiting for approval of test-counter; the agent escalates after 30 minutes to a
    Feishu group, an Agentry-format receiver and two addresses; another Feishu group is asked first."""
    ordinary, escalation, agentry = receivers

    def make(**agent_fields):
        agent = scripted_agent(
            {
                "scenarios": [
                    {
                        "match": ".",
                        "steps": [
                            {"tool_calls": [{"name": "test-counter", "arguments": {"label": INJECTION}}]},
                            {"content": "done"},
                        ],
                    }
                ]
            },
            tools=["test-counter"],
            approval={"test-counter": "always"},
            approval_escalate_after_minutes=ESCALATE_AFTER,
            **agent_fields,
        )
        feishu = {"format": "feishu", "secret": "whsec_x", "bot_secret": BOT_SECRET}
        Webhook.objects.create(agent=agent, url=ordinary.url, **feishu)
        Webhook.objects.create(agent=agent, url=escalation.url, escalation=True, **feishu)
        Webhook.objects.create(agent=agent, url=agentry.url, escalation=True, secret="whsec_esc")
        Webhook.objects.create(
            agent=agent, format="email", email_to=ESCALATION_EMAILS, escalation=True, secret="whsec_mail"
        )
        approvers_join(agent, "ops@example.com", "lead@example.com")
        run = advance(start_run(agent, "record"))
        assert run.status == "awaiting_approval", run.error
        return run, Approval.objects.get(run=run)

    return make


@pytest.fixture
def approver(db):
    user = User.objects.create_user("approver", password="approver-pass-1")
    user.groups.add(Group.objects.get(name="Approvers"))
    return user


def approvers_join(agent, *emails: str) -> None:
    """These addresses as approvers of the agent's workspace: approvals are mailed to them only."""
    for email in emails:
        user = User.objects.create_user(email.split("@")[0], email=email)
        membership_set(user=user, workspace=agent.workspace, role=Role.APPROVER)


def _after(approval: Approval, minutes: float):
    return approval.created_at + timedelta(minutes=minutes)


def _hooks(run, event_type: str) -> list[tuple[str, bool]]:
    deliveries = WebhookDelivery.objects.filter(run_event__run=run, event_type=event_type)
    return sorted(deliveries.values_list("webhook__format", "webhook__escalation"))


def _email_deliveries(run, event_type: str = "approval.escalated"):
    return WebhookDelivery.objects.filter(run_event__run=run, event_type=event_type, webhook__format="email")


def _deliver_all(run, event_type: str) -> None:
    for delivery in WebhookDelivery.objects.filter(run_event__run=run, event_type=event_type):
        assert webhook_attempt(delivery_id=delivery.pk) is None
        delivery.refresh_from_db()
        assert delivery.status == "delivered", list(delivery.attempt_rows.values_list("error", flat=True))


def test_an_approval_waiting_past_the_time_is_escalated_once_to_the_escalation_channels(parked, receivers, mailoutbox):
    ordinary, escalation, agentry = receivers
    run, approval = parked()
    # The ordinary request goes to the group asked first only.
    assert _hooks(run, "approval.requested") == [("feishu", False)]

    assert approvals_escalate(now=_after(approval, ESCALATE_AFTER - 0.5)) == 0
    assert not RunEvent.objects.filter(run=run, type="approval.escalated").exists()
    assert mailoutbox == []

    now = _after(approval, ESCALATE_AFTER + 1)
    assert approvals_escalate(now=now) == 1
    assert approvals_escalate(now=now + timedelta(minutes=5)) == 0
    [event] = RunEvent.objects.filter(run=run, type="approval.escalated")
    assert event.payload["approval_id"] == approval.pk and event.payload["waited_minutes"] == ESCALATE_AFTER + 1
    approval.refresh_from_db()
    assert approval.escalated_at == now and approval.status == "pending"
    # Written with the event, for the escalation channels only.
    assert _hooks(run, "approval.escalated") == [("agentry", True), ("email", True), ("feishu", True)]

    _deliver_all(run, "approval.escalated")
    assert ordinary.posts == []
    [post] = escalation.posts
    assert post["problems"] == []  # Feishu's card shape and its signature with the bot's secret
    card = post["body"]["card"]
    assert card["header"]["title"]["content"] == f"Approval waiting {ESCALATE_AFTER + 1} minutes: test-counter"
    text = json.dumps(card, ensure_ascii=False)
    assert run.agent.slug in text and str(run.pk) in text
    assert f"{PUBLIC_URL}/approvals/{approval.pk}/" in text
    assert "@all" not in text and "<a " not in text

    [request] = agentry.requests
    headers, body = request["headers"], request["body"]
    mac = hmac.new(b"whsec_esc", headers["x-agentry-timestamp"].encode() + b"." + body, hashlib.sha256)
    assert headers["x-agentry-signature"] == "sha256=" + mac.hexdigest()
    assert json.loads(body)["type"] == "approval.escalated"

    [email] = mailoutbox
    [attempt] = WebhookAttempt.objects.filter(delivery__in=_email_deliveries(run))
    assert attempt.number == 1 and attempt.error == "" and attempt.http_status is None and not attempt.will_retry
    assert email.to == ["ops@example.com", "lead@example.com"]
    assert email.subject == f"[Agentry] Approval waiting {ESCALATE_AFTER + 1} minutes: test-counter"
    # Plain text only: the model's markup is shown as written, never rendered.
    assert email.content_subtype == "plain" and email.alternatives == []
    assert f"{PUBLIC_URL}/approvals/{approval.pk}/" in email.body
    assert json.dumps(INJECTION)[1:-1] in email.body and run.agent.slug in email.body and str(run.pk) in email.body


def test_a_decision_after_an_escalation_follows_up_in_both_chat_groups(parked, approver):
    run, approval = parked()
    approvals_escalate(now=_after(approval, ESCALATE_AFTER))
    approval_decide(approval_id=approval.pk, user=approver, decision="reject", channel="page", reason="no")
    assert _hooks(run, "approval.decided") == [("email", True), ("feishu", False), ("feishu", True)]


def test_a_decided_approval_is_never_escalated(parked, approver, mailoutbox):
    run, approval = parked()
    approval_decide(approval_id=approval.pk, user=approver, decision="reject", channel="page", reason="no")
    # The escalation channels never showed the card, so they get no follow-up either.
    assert _hooks(run, "approval.decided") == [("feishu", False)]
    assert approvals_escalate(now=_after(approval, 10 * ESCALATE_AFTER)) == 0
    assert not RunEvent.objects.filter(run=run, type="approval.escalated").exists()
    assert mailoutbox == []


def test_an_agent_without_an_escalation_time_never_escalates(parked, mailoutbox):
    run, approval = parked()
    Agent.objects.filter(pk=run.agent_id).update(approval_escalate_after_minutes=None)
    assert approvals_escalate(now=_after(approval, 7 * 24 * 60)) == 0
    approval.refresh_from_db()
    assert approval.escalated_at is None and mailoutbox == []


def test_no_link_without_a_public_url(parked, settings, mailoutbox):
    run, approval = parked()
    settings.AGENTRY_PUBLIC_URL = ""
    approvals_escalate(now=_after(approval, ESCALATE_AFTER))
    [delivery] = _email_deliveries(run)
    assert webhook_attempt(delivery_id=delivery.pk) is None
    [email] = mailoutbox
    assert "/approvals/" not in email.body


def test_the_expiry_beat_also_escalates(parked, mailoutbox):
    run, approval = parked()
    Approval.objects.filter(pk=approval.pk).update(created_at=timezone.now() - timedelta(minutes=ESCALATE_AFTER))
    approvals_expire_task()
    approval.refresh_from_db()
    assert approval.escalated_at is not None and _email_deliveries(run).count() == 1


def test_two_passes_at_once_escalate_once(parked, mailoutbox):
    run, approval = parked()
    now = _after(approval, ESCALATE_AFTER)
    counts, start = [], threading.Barrier(2)

    def beat():
        try:
            start.wait()
            counts.append(approvals_escalate(now=now))
        finally:
            connection.close()  # each thread's own connection

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(counts) == [0, 1]
    assert RunEvent.objects.filter(run=run, type="approval.escalated").count() == 1
    assert _email_deliveries(run).count() == 1


class RefusingBackend(BaseEmailBackend):
    """An SMTP server that refuses: send_messages raises, as smtplib does."""

    def send_messages(self, email_messages):
        raise ConnectionRefusedError("mail server down")


def test_a_failed_email_is_a_recorded_attempt_retried_with_backoff(parked, settings):
    run, approval = parked()
    settings.EMAIL_BACKEND = f"{__name__}.RefusingBackend"
    settings.AGENTRY_WEBHOOK_MAX_ATTEMPTS = 2
    approvals_escalate(now=_after(approval, ESCALATE_AFTER))
    [delivery] = _email_deliveries(run)
    delay = webhook_attempt(delivery_id=delivery.pk)
    assert delay is not None and delay > 0
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.attempts == 1
    [attempt] = delivery.attempt_rows.all()
    assert attempt.will_retry and attempt.http_status is None
    assert attempt.error == "ConnectionRefusedError: mail server down"
    # The last allowed attempt that fails settles the delivery as failed, recorded too.
    assert webhook_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.finished_at is not None
    assert list(delivery.attempt_rows.values_list("number", "will_retry")) == [(1, True), (2, False)]


def test_an_ordinary_email_webhook_gets_the_approval_request_not_the_escalation(scripted_agent, settings):
    settings.AGENTRY_PUBLIC_URL = PUBLIC_URL
    agent = scripted_agent(
        {
            "scenarios": [
                {
                    "match": ".",
                    "steps": [
                        {"tool_calls": [{"name": "test-counter", "arguments": {"label": "x"}}]},
                        {"content": "done"},
                    ],
                }
            ]
        },
        tools=["test-counter"],
        approval={"test-counter": "always"},
        approval_escalate_after_minutes=ESCALATE_AFTER,
    )
    Webhook.objects.create(agent=agent, format="email", email_to="ops@example.com", secret="whsec_mail")
    approvers_join(agent, "ops@example.com")
    run = advance(start_run(agent, "record"))
    assert run.status == "awaiting_approval", run.error
    approval = Approval.objects.get(run=run)
    [delivery] = WebhookDelivery.objects.filter(run_event__run=run, webhook__format="email")
    assert delivery.event_type == "approval.requested"
    assert webhook_attempt(delivery_id=delivery.pk) is None
    [email] = mail.outbox
    assert email.to == ["ops@example.com"] and email.subject == "[Agentry] Approval needed: test-counter"
    assert f"{PUBLIC_URL}/approvals/{approval.pk}/" in email.body
    approvals_escalate(now=_after(approval, ESCALATE_AFTER))
    assert not _email_deliveries(run).exists()


@pytest.mark.django_db
def test_an_escalation_time_is_checked():
    agent = make_agent(approval_escalate_after_minutes=0)
    with pytest.raises(ValidationError) as refused:
        agent.full_clean()
    assert "approval_escalate_after_minutes" in refused.value.message_dict


@pytest.mark.django_db
def test_an_email_webhook_needs_valid_addresses_and_other_formats_a_url():
    agent = make_agent()
    for fields, field in [
        ({"format": "email", "email_to": ""}, "email_to"),
        ({"format": "email", "email_to": "ops@example.com\nnot-an-address"}, "email_to"),
        ({"format": "agentry", "url": ""}, "url"),
        ({"format": "slack", "url": ""}, "url"),
    ]:
        with pytest.raises(ValidationError) as refused:
            Webhook(agent=agent, workspace=agent.workspace, secret="whsec_x", **fields).full_clean()
        assert field in refused.value.message_dict, fields
    Webhook(
        agent=agent,
        workspace=agent.workspace,
        secret="whsec_x",
        format="email",
        email_to="ops@example.com, lead@example.com",
    ).full_clean()


@pytest.mark.django_db
def test_the_webhook_admin_adds_an_email_channel_without_a_url_and_refuses_one_without_addresses(admin_client):
    agent = make_agent()
    form = {"agent": agent.pk, "format": "email", "is_active": "on", "escalation": "on"}
    refused = admin_client.post("/admin/notifications/webhook/add/", form)
    assert refused.status_code == 200 and "email_to" in refused.context["adminform"].form.errors
    refused = admin_client.post("/admin/notifications/webhook/add/", {**form, "format": "slack"})
    assert refused.status_code == 200 and "url" in refused.context["adminform"].form.errors
    form["email_to"] = "ops@example.com"
    assert admin_client.post("/admin/notifications/webhook/add/", form).status_code == 302
    hook = Webhook.objects.get()
    assert hook.format == "email" and hook.url == "" and hook.recipients == ["ops@example.com"]


@pytest.mark.django_db
def test_the_webhook_admin_marks_an_escalation_channel(admin_client):
    agent = make_agent()
    form = {"agent": agent.pk, "url": "https://hooks.example.com/escalations", "is_active": "on", "escalation": "on"}
    assert admin_client.post("/admin/notifications/webhook/add/", form).status_code == 302
    assert Webhook.objects.get().escalation is True
