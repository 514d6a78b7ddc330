"""Webhook targets go through the outbound guard: an internal receiver is reached only when an
operator listed it in AGENTRY_WEBHOOK_ALLOWLIST, a list kept apart from the tools' one."""

import pytest

from conversations.batch import run_event_append
from conversations.services import conversation_create
from engine.admission import message_post
from notifications.models import Webhook, WebhookDelivery
from notifications.sending import webhook_attempt
from tests.support.api_server import WebhookReceiver
from tests.support.factories import make_agent
from tests.support.servers import petstore  # noqa: F401 (fixture
from tools.executors import execute_tool
from tools.registry import ToolContext


@pytest.fixture
def receiver():
    server = WebhookReceiver()
    yield server
    server.stop()


def _delivery(url: str) -> WebhookDelivery:
    agent = make_agent()
    run = message_post(conversation=conversation_create(agent=agent), content="hello")
    event = run_event_append(run_id=run.pk, type="run.completed", payload={})
    hook = Webhook.objects.create(agent=agent, url=url, secret="whsec_test")
    return WebhookDelivery.objects.create(
        webhook=hook, run_event=event, event_type="run.completed", payload={"type": "run.completed"}
    )


@pytest.mark.django_db
def test_a_webhook_to_an_internal_address_is_refused_for_good(settings, receiver):
    settings.AGENTRY_WEBHOOK_ALLOWLIST = []
    settings.AGENTRY_OUTBOUND_ALLOWLIST = ["127.0.0.1"]  # tools may reach it; webhooks have their own list
    delivery = _delivery(receiver.url)
    assert webhook_attempt(delivery_id=delivery.pk) is None

    delivery.refresh_from_db()
    assert delivery.status == "failed" and receiver.requests == []
    [attempt] = delivery.attempt_rows.all()
    assert not attempt.will_retry and attempt.http_status is None
    assert "loopback" in attempt.error and "AGENTRY_WEBHOOK_ALLOWLIST" in attempt.error


@pytest.mark.django_db
def test_the_metadata_service_is_never_a_webhook_target(settings):
    settings.AGENTRY_WEBHOOK_ALLOWLIST = []
    delivery = _delivery("http://169.254.169.254/latest/meta-data/")
    webhook_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "failed" and "link-local" in delivery.attempt_rows.get().error


@pytest.mark.django_db
def test_an_allowlisted_internal_receiver_gets_its_webhooks(settings, receiver):
    port = receiver.url.split(":")[2].split("/")[0]
    settings.AGENTRY_WEBHOOK_ALLOWLIST = [f"127.0.0.1:{port}"]
    settings.AGENTRY_OUTBOUND_ALLOWLIST = []
    delivery = _delivery(receiver.url)
    webhook_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and len(receiver.requests) == 1
    assert delivery.attempt_rows.get().http_status == 200


def test_allowing_a_webhook_receiver_does_not_open_it_to_tools(settings, petstore):
    settings.AGENTRY_OUTBOUND_ALLOWLIST = []
    settings.AGENTRY_WEBHOOK_ALLOWLIST = ["127.0.0.1"]
    outcome = execute_tool(
        spec={"name": "fetch_url", "kind": "python", "timeout_seconds": 10, "max_result_chars": 500},
        arguments={"url": f"{petstore.base_url}/page"},
        ctx=ToolContext(run_id="r", tool_call_id="c", idempotency_key="r:c"),
    )
    assert outcome.status == "error" and "the host is not allowed" in outcome.content
