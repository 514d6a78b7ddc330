"""Where operators meet alerts: open firings head the monitoring dashboard (for holders of
view_alertfiring), rules are configured in the admin with their threshold checked against their
kind, firings are read-only there, and /metrics has a gauge per rule."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from alerts.models import AlertFiring, AlertRule
from alerts.services import alert_rules_evaluate
from tests.alerts.conftest import make_rule, pending_approval
from tests.support.factories import ModelConfigFactory, make_agent

pytestmark = pytest.mark.django_db


def _staff(client, *codenames: str):
    user = get_user_model().objects.create_user("oncall", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


@pytest.fixture
def quiet_broker(monkeypatch):
    monkeypatch.setattr(
        "console.monitoring.selectors.queue_depths", lambda: {"transport": "redis", "queues": [], "error": ""}
    )
    monkeypatch.setattr("console.monitoring.selectors.workers_online", lambda: {"online": [], "error": ""})


@pytest.fixture
def firing():
    now = timezone.now()
    agent = make_agent(name="Support bot")
    make_rule(kind="approval_age", name="Approvals waiting", agent=agent, threshold=15)
    make_rule(kind="tokens", name="Quiet tokens", threshold=10**9)
    pending_approval(agent, created_at=now - timedelta(minutes=20))
    alert_rules_evaluate(now=now)
    return AlertFiring.objects.get()


def test_the_dashboard_shows_open_firings_to_those_who_may_see_them(client, quiet_broker, firing):
    _staff(client, "view_run", "view_alertfiring")
    page = client.get(reverse("monitoring:dashboard")).content.decode()
    assert f'data-alert="{firing.pk}"' in page and 'data-kind="approval_age"' in page
    assert "Approvals waiting" in page and "agent Support bot" in page and ">20<" in page and ">15<" in page
    assert page.index('id="alerts-firing"') < page.index('id="runs-now"')
    assert f'data-alert="{firing.pk}"' in client.get(reverse("monitoring:panel")).content.decode()
    [alert] = client.get(reverse("monitoring:data")).json()["alerts"]
    assert alert["rule"] == "Approvals waiting" and alert["value"] == "20" and alert["threshold"] == "15"

    AlertFiring.objects.update(resolved_at=timezone.now())
    assert 'id="alerts-firing"' not in client.get(reverse("monitoring:dashboard")).content.decode()


def test_operators_see_firings_on_the_dashboard(client, quiet_broker, firing):
    user = _staff(client)
    user.groups.add(Group.objects.get(name="Operators"))
    assert f'data-alert="{firing.pk}"' in client.get(reverse("monitoring:dashboard")).content.decode()
    assert client.get(reverse("admin:alerts_alertrule_changelist")).status_code == 403


def test_without_view_alertfiring_the_dashboard_shows_no_alerts(client, quiet_broker, firing):
    _staff(client, "view_run")
    page = client.get(reverse("monitoring:dashboard")).content.decode()
    assert 'id="alerts-firing"' not in page and "Approvals waiting" not in page
    assert client.get(reverse("monitoring:data")).json()["alerts"] is None


def _rule_form(**fields) -> dict:
    return {
        "name": "Spend",
        "kind": "cost",
        "agent": "",
        "model_config": "",
        "window": "day",
        "threshold": "25",
        "min_runs": "10",
        "enabled": "on",
        "email_to": "oncall@example.com",
        "send_webhooks": "on",
        **fields,
    }


@pytest.mark.parametrize(
    "fields, field, message",
    [
        ({"kind": "failure_rate", "threshold": "150"}, "threshold", "at most 100"),
        ({"kind": "tokens", "threshold": "10.5"}, "threshold", "whole number"),
        ({"kind": "stuck_runs", "threshold": "0.5"}, "threshold", "whole number of minutes"),
        ({"threshold": "-1"}, "threshold", "above 0"),
        ({"threshold": "lots"}, "threshold", "Enter a number"),
        ({"kind": "failure_rate", "threshold": "10", "min_runs": "0"}, "min_runs", "At least one run"),
        ({"email_to": "oncall@example.com, not-an-address"}, "email_to", "not an email address"),
        ({"kind": "approval_age", "threshold": "5", "model_config": "MODEL"}, "model_config", "per agent"),
        ({"agent": "AGENT", "model_config": "MODEL"}, "model_config", "not both"),
        ({"kind": "volume"}, "kind", "Select a valid choice"),
    ],
)
def test_the_admin_rejects_a_rule_whose_threshold_or_scope_does_not_fit(admin_client, fields, field, message):
    agent = make_agent()
    fields = {k: {"AGENT": agent.pk, "MODEL": agent.model_config.pk}.get(v, v) for k, v in fields.items()}
    response = admin_client.post(reverse("admin:alerts_alertrule_add"), _rule_form(**fields))
    assert response.status_code == 200 and not AlertRule.objects.exists()
    errors = response.context["adminform"].form.errors
    assert field in errors and message in " ".join(errors[field])


def test_the_admin_saves_a_rule_that_fits(admin_client):
    model = ModelConfigFactory()
    response = admin_client.post(
        reverse("admin:alerts_alertrule_add"), _rule_form(model_config=model.pk, threshold="2.5")
    )
    assert response.status_code == 302
    rule = AlertRule.objects.get()
    assert rule.model_config == model and rule.recipients == ["oncall@example.com"]


def test_rules_and_firings_in_the_admin_follow_the_permissions(client, firing):
    _staff(client, "view_run")
    for name in ("admin:alerts_alertrule_changelist", "admin:alerts_alertfiring_changelist"):
        assert client.get(reverse(name)).status_code == 403
    client.logout()
    get_user_model().objects.all().delete()
    _staff(client, "view_alertfiring", "view_alertrule")
    changelist = client.get(reverse("admin:alerts_alertfiring_changelist") + "?state=open").content.decode()
    assert "Approvals waiting" in changelist
    resolved = client.get(reverse("admin:alerts_alertfiring_changelist") + "?state=resolved").content.decode()
    assert firing.summary not in resolved
    assert client.get(reverse("admin:alerts_alertfiring_add")).status_code == 403
    assert client.post(reverse("admin:alerts_alertfiring_delete", args=[firing.pk]), {"post": "yes"}).status_code == 403
    assert client.post(reverse("admin:alerts_alertrule_add"), _rule_form()).status_code == 403
    assert AlertFiring.objects.filter(pk=firing.pk).exists() and AlertRule.objects.count() == 2


def test_metrics_expose_a_firing_gauge_per_rule(client, settings, firing):
    settings.AGENTRY_METRICS_TOKEN = "scrape"
    make_rule(kind="cost", name="Off", threshold=1, enabled=False)
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape").content.decode()
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "agentry_alerts_firing"]
    assert {s.labels["rule"]: s.value for s in family.samples} == {"Approvals waiting": 1, "Quiet tokens": 0}
