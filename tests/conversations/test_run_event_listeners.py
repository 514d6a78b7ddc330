"""The ledger with no run-event listener registered (a process that loads no app above it, or one
that hears nothing): events are written as ever, in their one statement, and nothing else is read
or written for them."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import batch
from conversations.events import EventType
from conversations.models import RunEvent, RunStatus
from notifications.models import Webhook, WebhookDelivery
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run
from tests.support.llm import echo_script
from tests.support.runs import advance, start_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_listener(monkeypatch):
    monkeypatch.setattr(batch, "_listeners", [])


def test_an_event_is_one_statement_and_nothing_listens(no_listener):
    agent = make_agent()
    # A webhook row is not a listener: only a registered app reads it.
    Webhook.objects.create(agent=agent, url="https://hooks.example.com/agentry", secret="s" * 32)
    run = ledger_run(agent, status=RunStatus.RUNNING, stop_reason="", lease_owner="w")

    with CaptureQueriesContext(connection) as queries:
        event = batch.run_event_append(run_id=run.pk, type=EventType.RUN_COMPLETED, lease_owner="w")

    assert RunEvent.objects.get(run=run).pk == event.pk and event.seq == 1
    assert len(queries) == (1 if connection.vendor == "postgresql" else 2)  # SQLite: guard, then insert
    assert not WebhookDelivery.objects.exists()
    assert not batch.run_listened(run_id=run.pk) and batch.unheard() == ()
    reads = batch.Batch()
    batch.run_guard(reads, run_id=run.pk, lease_owner=None)
    assert batch.listening_read(reads, run_id=run.pk)({}) is False


def test_a_run_goes_from_start_to_answer_with_no_listener(no_listener, scripted_agent):
    agent = scripted_agent(echo_script("one"), tools=["test-echo"])
    Webhook.objects.create(agent=agent, url="https://hooks.example.com/agentry", secret="s" * 32)
    run = advance(start_run(agent))
    assert run.status == RunStatus.COMPLETED
    assert RunEvent.objects.filter(run=run, type="run.completed").exists()
    assert not WebhookDelivery.objects.exists()
