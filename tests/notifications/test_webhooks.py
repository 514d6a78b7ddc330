"""Webhooks: signed POSTs on terminal states and approval requests, retried with backoff,
each attempt a row; against a local HTTP server and a real worker."""

import hashlib
import hmac
import json

import pytest
from django.db import connection

from conversations.models import Run
from conversations.services import conversation_create
from engine.admission import message_post
from notifications.models import Webhook, WebhookDelivery
from tests.support.api_server import WebhookReceiver
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tests.support.waits import wait_for

SECRET = "whsec_test-secret"


@pytest.fixture
def receiver():
    server = WebhookReceiver()
    yield server
    server.stop()


@pytest.fixture
def hooks_agent(fake_llm):
    fake_llm.script(
        "hooks",
        {
            "scenarios": [
                {
                    "match": "^record",
                    "steps": [
                        {"tool_calls": [{"name": "test-counter", "arguments": {"label": "hook"}}]},
                        {"content": "recorded"},
                    ],
                }
            ],
            "fallback": {"content": "answer to {last_user_message}"},
        },
    )
    return make_agent(
        tools=["test-counter"],
        approval={"test-counter": "always"},
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="hooks"),
    )


def _settled(run, count: int = 1) -> list[WebhookDelivery]:
    deliveries = WebhookDelivery.objects.filter(run_event__run=run).exclude(status="pending")
    return list(deliveries) if deliveries.count() >= count else []


def _post(agent, content: str, conversation=None):
    conversation = conversation or conversation_create(agent=agent, owner=make_user())
    return message_post(conversation=conversation, content=content)


@pytest.mark.e2e
def test_a_completed_run_is_posted_with_a_valid_signature(worker, hooks_agent, receiver):
    hook = Webhook.objects.create(agent=hooks_agent, url=receiver.url, secret=SECRET)
    run = _post(hooks_agent, "hello")
    [delivery] = wait_for(lambda: _settled(run), message="the webhook delivery")

    assert delivery.status == "delivered" and delivery.event_type == "run.completed"
    [request] = receiver.requests
    headers, body = request["headers"], request["body"]
    expected = hmac.new(SECRET.encode(), headers["x-agentry-timestamp"].encode() + b"." + body, hashlib.sha256)
    assert headers["x-agentry-signature"] == "sha256=" + expected.hexdigest()
    assert headers["x-agentry-event"] == "run.completed"
    assert headers["x-agentry-delivery"] == str(delivery.pk)
    payload = json.loads(body)
    assert payload["id"] == str(delivery.pk) and payload["type"] == "run.completed"
    assert payload["run"]["id"] == str(run.pk) and payload["run"]["status"] == "completed"
    assert payload["run"]["output"] == "answer to hello" and payload["run"]["agent"] == hooks_agent.slug
    [attempt] = delivery.attempt_rows.all()
    assert attempt.http_status == 200 and not attempt.will_retry
    # The secret is stored encrypted.
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM conversations_webhook WHERE id = %s", [hook.pk])
        assert SECRET not in cursor.fetchone()[0]


@pytest.mark.e2e
def test_server_errors_and_429_are_retried_with_backoff(worker, hooks_agent, receiver):
    receiver.statuses = [500, 429, 200]
    Webhook.objects.create(agent=hooks_agent, url=receiver.url, secret=SECRET)
    run = _post(hooks_agent, "hello")
    [delivery] = wait_for(lambda: _settled(run), message="the webhook delivery")

    assert delivery.status == "delivered" and delivery.attempts == 3
    attempts = list(delivery.attempt_rows.values_list("number", "http_status", "will_retry"))
    assert attempts == [(1, 500, True), (2, 429, True), (3, 200, False)]
    # Every attempt is signed anew, for the same delivery.
    assert len({r["headers"]["x-agentry-delivery"] for r in receiver.requests}) == 1


@pytest.mark.e2e
def test_a_client_error_is_not_retried_and_attempts_are_bounded(worker, hooks_agent, receiver, settings):
    receiver.statuses = [400] + [503] * 10
    Webhook.objects.create(agent=hooks_agent, url=receiver.url, secret=SECRET)
    run = _post(hooks_agent, "hello")
    [rejected] = wait_for(lambda: _settled(run), message="the rejected delivery")
    assert rejected.status == "failed" and rejected.attempts == 1

    run = _post(hooks_agent, "again")
    [exhausted] = wait_for(lambda: _settled(run), timeout=30, message="the delivery to give up")
    assert exhausted.status == "failed" and exhausted.attempts == settings.AGENTRY_WEBHOOK_MAX_ATTEMPTS
    assert [a.http_status for a in exhausted.attempt_rows.all()] == [503] * settings.AGENTRY_WEBHOOK_MAX_ATTEMPTS
    assert exhausted.attempt_rows.filter(will_retry=True).count() == settings.AGENTRY_WEBHOOK_MAX_ATTEMPTS - 1


@pytest.mark.e2e
def test_approval_requests_are_posted_and_conversation_hooks_see_only_their_conversation(worker, hooks_agent, receiver):
    mine = conversation_create(agent=hooks_agent, owner=make_user())
    Webhook.objects.create(agent=hooks_agent, conversation=mine, url=receiver.url, secret=SECRET)
    elsewhere = _post(hooks_agent, "hello")
    parked = _post(hooks_agent, "record this", conversation=mine)
    [delivery] = wait_for(lambda: _settled(parked), message="the approval webhook")

    assert delivery.event_type == "approval.requested"
    payload = json.loads(receiver.requests[0]["body"])
    assert payload["run"]["id"] == str(parked.pk)
    assert payload["event"]["payload"]["approval_id"] == parked.approvals.get().pk
    assert payload["event"]["payload"]["tool"] == "test-counter"
    assert payload["event"]["payload"]["arguments"] == {"label": "hook"}
    wait_for(lambda: Run.objects.get(pk=elsewhere.pk).is_terminal, message="the other run")
    assert not WebhookDelivery.objects.filter(run_event__run=elsewhere).exists()


@pytest.mark.django_db
def test_the_admin_generates_the_secret_once_and_never_shows_it_again(admin_client, fake_llm):
    agent = make_agent()
    response = admin_client.post(
        "/admin/notifications/webhook/add/",
        {
            "agent": agent.pk,
            "url": "https://hooks.example.com/agentry",
            "is_active": "on",
            "new_secret": "",
        },
        follow=True,
    )
    hook = Webhook.objects.get()
    assert hook.secret.startswith("whsec_")
    assert hook.secret in response.content.decode()  # shown once, in the confirmation message
    page = admin_client.get(f"/admin/notifications/webhook/{hook.pk}/change/").content.decode()
    assert hook.secret not in page and hook.secret[-4:] in page
    assert admin_client.get("/admin/notifications/webhookdelivery/add/").status_code == 403
