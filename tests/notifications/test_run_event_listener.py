"""Notifications hear a run's events through the ledger's run-event listener
(conversations.batch.RunEventListener, registered by NotificationsConfig.ready): a webhook's
delivery is written in the transaction of the event it reports, so both commit or neither does."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.batch import _listeners, run_event_append
from conversations.events import EventType
from conversations.fencing import LeaseLost
from conversations.models import RunEvent, RunStatus
from notifications import deliveries
from notifications.models import Webhook, WebhookDelivery
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

URL = "https://hooks.example.com/agentry"
OWNER = "worker-1"


def _running_run_with_webhook():
    agent = make_agent()
    Webhook.objects.create(agent=agent, url=URL, secret="s" * 32)
    return ledger_run(agent, status=RunStatus.RUNNING, stop_reason="", lease_owner=OWNER)


def _ended(run, *, lease_owner: str) -> RunEvent:
    return run_event_append(run_id=run.pk, type=EventType.RUN_COMPLETED, payload={}, lease_owner=lease_owner)


def test_notifications_registered_their_listener_once():
    assert _listeners.count(deliveries.LISTENER) == 1


@pytest.mark.django_db
def test_the_delivery_is_written_in_the_event_s_transaction(sent_deliveries, django_capture_on_commit_callbacks):
    run = _running_run_with_webhook()
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as queries:
        event = _ended(run, lease_owner=OWNER)

    delivery = WebhookDelivery.objects.get(run_event=event)
    assert delivery.event_type == "run.completed" and sent_deliveries == [str(delivery.pk)]
    if connection.vendor == "postgresql":
        # Inside the test's own transaction the batch joins it; what matters is the order: the
        # event's one statement, then the delivery, with no commit in between.
        statements = [query["sql"] for query in queries]
        event_at = next(i for i, sql in enumerate(statements) if "conversations_runevent" in sql)
        delivery_at = next(
            i for i, sql in enumerate(statements) if sql.startswith('INSERT INTO "conversations_webhook')
        )
        assert event_at < delivery_at and "COMMIT" not in statements[event_at:delivery_at]


@pytest.mark.django_db
def test_a_failing_fence_writes_neither_the_event_nor_its_delivery(sent_deliveries):
    run = _running_run_with_webhook()
    with pytest.raises(LeaseLost):
        _ended(run, lease_owner="worker-2")
    assert not RunEvent.objects.filter(run=run).exists() and not WebhookDelivery.objects.exists()
    assert sent_deliveries == []


@pytest.mark.django_db(transaction=True)
def test_a_delivery_that_fails_to_be_written_takes_its_event_with_it(sent_deliveries, monkeypatch):
    """The listener runs in the event's transaction: an error there rolls the event back too, so the
    step is retried as a whole rather than leaving an event no webhook heard."""
    run = _running_run_with_webhook()
    written = deliveries.webhook_deliveries_create

    def broken(*, event):
        written(event=event)
        raise RuntimeError("the database refused the delivery")

    monkeypatch.setattr(deliveries, "webhook_deliveries_create", broken)
    with pytest.raises(RuntimeError):
        _ended(run, lease_owner=OWNER)
    assert not RunEvent.objects.filter(run=run).exists() and not WebhookDelivery.objects.exists()
    assert sent_deliveries == []

    monkeypatch.setattr(deliveries, "webhook_deliveries_create", written)
    event = _ended(run, lease_owner=OWNER)
    assert WebhookDelivery.objects.get().run_event_id == event.pk
