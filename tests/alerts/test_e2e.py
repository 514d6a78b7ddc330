"""Beat's entry names the evaluation task on the maintenance queue; a real worker evaluates the
rules, opens the firing and delivers its signed webhook."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.models import AlertFiring
from alerts.tasks import alert_rules_evaluate_task
from notifications.models import Webhook, WebhookDelivery
from platform_site.celery import app
from tests.alerts.conftest import make_rule, pending_approval
from tests.support.api_server import WebhookReceiver
from tests.support.factories import make_agent
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def test_beat_schedules_the_evaluation_and_a_worker_fires_and_posts_the_alert(worker):
    entry = app.conf.beat_schedule["evaluate-alerts"]
    assert entry["task"] == alert_rules_evaluate_task.name and entry["schedule"] == 60.0
    assert app.amqp.router.route({}, alert_rules_evaluate_task.name)["queue"].name == "maintenance"

    receiver = WebhookReceiver()
    try:
        agent = make_agent()
        Webhook.objects.create(agent=agent, url=receiver.url, secret="whsec_e2e", receives_alerts=True)
        rule = make_rule(kind="approval_age", agent=agent, threshold=1)
        pending_approval(agent, created_at=timezone.now() - timedelta(minutes=3))

        alert_rules_evaluate_task.delay()
        delivery = wait_for(
            lambda: WebhookDelivery.objects.filter(event_type="alert.firing", status="delivered").first(),
            message="the alert's webhook delivery",
        )
        assert AlertFiring.objects.get(rule=rule).resolved_at is None
        [request] = receiver.requests
        assert json.loads(request["body"])["id"] == str(delivery.pk)
    finally:
        receiver.stop()
