"""The negative-feedback-rate rule: fires when end users' negative ratings in the window reach the
threshold (with enough of them to mean something), resolves when they fall back, per agent or
for everything; a rule on a model config, or with a rate out of range, is refused."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from alerts.models import AlertFiring, AlertRule
from alerts.selectors import alert_rule_measure, window_feedback
from alerts.services import alert_rules_evaluate
from conversations.models import RunFeedback
from tests.alerts.conftest import make_rule
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db


def _rate(agent, rating: int, *, at) -> RunFeedback:
    feedback = RunFeedback.objects.create(run=ledger_run(agent), rating=rating)
    RunFeedback.objects.filter(pk=feedback.pk).update(created_at=at)
    return feedback


def test_negative_feedback_of_one_agent_fires_and_resolves_as_the_window_slides():
    now = timezone.now()
    agent, other = make_agent(), make_agent()
    rule = make_rule(kind="negative_feedback", agent=agent, window="hour", threshold=50, min_runs=4)
    for _ in range(5):
        _rate(other, -1, at=now - timedelta(minutes=5))  # another agent's: not counted
    _rate(agent, -1, at=now - timedelta(minutes=90))  # outside the hour
    _rate(agent, -1, at=now - timedelta(minutes=20))
    _rate(agent, 1, at=now - timedelta(minutes=10))
    _rate(agent, -1, at=now - timedelta(minutes=5))
    # 2 of 3 negative: over the threshold, but fewer posts than min_runs.
    assert window_feedback(rule=rule, now=now) == {"total": 3, "negative": 2}
    assert alert_rules_evaluate(now=now)["fired"] == 0

    _rate(agent, 1, at=now - timedelta(minutes=1))
    assert alert_rules_evaluate(now=now) == {"evaluated": 1, "fired": 1, "resolved": 0}
    firing = AlertFiring.objects.get(rule=rule, resolved_at__isnull=True)
    assert firing.value == 50
    assert firing.summary == "2 of 4 feedback posts negative in 1 h (50.00%, threshold 50%)"

    assert alert_rules_evaluate(now=now + timedelta(hours=1))["resolved"] == 1


def test_a_rule_on_everything_counts_every_agents_feedback_and_a_day_window():
    now = timezone.now()
    rule = make_rule(kind="negative_feedback", window="day", threshold="10", min_runs=1)
    _rate(make_agent(), -1, at=now - timedelta(hours=20))
    _rate(make_agent(), 1, at=now - timedelta(hours=2))
    measurement = alert_rule_measure(rule=rule, now=now)
    assert measurement.holds and measurement.value == 50
    assert "1 of 2 feedback posts negative in 24 h" in measurement.summary


def test_no_feedback_measures_zero_and_never_fires():
    rule = make_rule(kind="negative_feedback", window="hour", threshold=1, min_runs=1)
    measurement = alert_rule_measure(rule=rule, now=timezone.now())
    assert measurement.value == 0 and not measurement.holds


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"threshold": 0}, "threshold"),
        ({"threshold": "100.5"}, "threshold"),
        ({"threshold": 10, "min_runs": 0}, "min_runs"),
    ],
)
def test_bad_negative_feedback_rules_are_refused(fields, field):
    rule = AlertRule(name="bad", kind="negative_feedback", window="hour", **fields)
    with pytest.raises(ValidationError) as refused:
        rule.full_clean()
    assert field in refused.value.message_dict


def test_a_negative_feedback_rule_cannot_watch_a_model_config():
    agent = make_agent()
    rule = AlertRule(name="bad", kind="negative_feedback", window="hour", threshold=10, model_config=agent.model_config)
    with pytest.raises(ValidationError) as refused:
        rule.full_clean()
    assert "model_config" in refused.value.message_dict


def test_the_rule_admin_offers_the_new_kind(admin_client):
    page = admin_client.get("/admin/alerts/alertrule/add/").content.decode()
    assert 'value="negative_feedback"' in page
