"""Retention and triggers: a schedule's fires and a hook's deliveries outlive the runs retention
purges (unlinked, so a schedule's page still shows when it fired and a delivery id stays
refused), and a schedule whose running conversation is purged starts a new one."""

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.retention import runs_purge
from tests.support.factories import make_agent
from tests.support.ledger_seed import ledger_seed
from triggers.models import Hook, HookDelivery, Schedule, ScheduleFire

pytestmark = pytest.mark.django_db


def test_fires_and_deliveries_stay_when_their_runs_are_purged():
    agent = make_agent(slug="purged", retention_days=30)
    fired, delivered = ledger_seed(agent, 2, created_at=timezone.now() - timedelta(days=31))
    schedule = Schedule.objects.create(
        agent=agent, name="daily", cron="0 9 * * *", message="早报", conversation=fired.conversation
    )
    fire = ScheduleFire.objects.create(schedule=schedule, fire_at=fired.created_at, outcome="started", run=fired)
    hook = Hook.objects.create(agent=agent, name="orders", secret="whsec_x", message="{{ payload.id }}")
    delivery = HookDelivery.objects.create(hook=hook, delivery_id="d-1", signature="0" * 64, run=delivered)

    assert runs_purge(agent=agent).counts["runs"] == 2
    fire.refresh_from_db()
    delivery.refresh_from_db()
    schedule.refresh_from_db()
    assert fire.run is None and fire.outcome == "started"
    assert delivery.run is None and delivery.delivery_id == "d-1"
    assert schedule.conversation is None  # the next fire of a SAME schedule starts a new one
