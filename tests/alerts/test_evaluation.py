"""Each kind of alert rule fires when its threshold is crossed and resolves when the condition
clears, measured over ledger rows written directly; the rollups give the same numbers as the
ledger; one open firing per rule however many evaluations run."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from alerts.models import AlertFiring, AlertRule
from alerts.selectors import alert_rule_measure, window_runs, window_usage
from alerts.services import alert_firing_open, alert_rules_evaluate
from conversations.models import Approval, Run
from conversations.monitoring.rollups import rollups_refresh
from tests.alerts.conftest import make_rule, pending_approval
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db


def _open(rule) -> AlertFiring | None:
    return AlertFiring.objects.filter(rule=rule, resolved_at__isnull=True).first()


def test_tokens_per_hour_of_one_agent_fire_and_resolve_as_the_window_slides():
    now = timezone.now()
    agent, other = make_agent(), make_agent()
    rule = make_rule(kind="tokens", agent=agent, window="hour", threshold=1000)
    ledger_call(ledger_run(other), started_at=now - timedelta(minutes=5), prompt_tokens=5000)
    run = ledger_run(agent)
    ledger_call(run, started_at=now - timedelta(minutes=90), prompt_tokens=5000)  # outside the hour
    ledger_call(run, started_at=now - timedelta(minutes=10), prompt_tokens=500, completion_tokens=100)

    assert alert_rules_evaluate(now=now)["fired"] == 0
    ledger_call(run, started_at=now - timedelta(minutes=5), prompt_tokens=380, completion_tokens=20)
    assert alert_rules_evaluate(now=now) == {"evaluated": 1, "fired": 1, "resolved": 0}

    firing = _open(rule)
    assert firing.value == 1000 and firing.threshold == 1000 and firing.started_at == now
    assert "1000 tokens in 1 h (threshold 1000)" in firing.summary
    assert alert_rules_evaluate(now=now + timedelta(minutes=1))["fired"] == 0  # still the same firing

    later = now + timedelta(hours=1)
    assert alert_rules_evaluate(now=later)["resolved"] == 1
    firing.refresh_from_db()
    assert firing.resolved_at == later and firing.resolved_value == 0
    assert not _open(rule)


def test_cost_per_day_of_one_model_config_counts_its_calls_only():
    now = timezone.now()
    agent = make_agent()
    other_model = ModelConfigFactory()
    rule = make_rule(kind="cost", model_config=agent.model_config, window="day", threshold="1.00")
    run = ledger_run(agent)
    ledger_call(run, started_at=now - timedelta(hours=20), cost="0.60")
    ledger_call(ledger_run(make_agent(model_config=other_model)), started_at=now, cost="5")
    alert_rules_evaluate(now=now)
    assert not _open(rule)

    ledger_call(run, started_at=now - timedelta(hours=1), cost="0.45")
    alert_rules_evaluate(now=now)
    assert _open(rule).value == Decimal("1.05")

    alert_rules_evaluate(now=now + timedelta(hours=5))  # the first call left the day
    firing = AlertFiring.objects.get(rule=rule)
    assert firing.resolved_at is not None and firing.resolved_value == Decimal("0.45")


def test_failure_rate_waits_for_the_minimum_number_of_runs():
    now = timezone.now()
    agent = make_agent()
    rule = make_rule(kind="failure_rate", window="hour", threshold=50, min_runs=3)
    ledger_run(agent, status="failed", stop_reason="provider_error", finished_at=now - timedelta(minutes=1))
    alert_rules_evaluate(now=now)
    assert not _open(rule)  # 1 failed of 1 does not page

    ledger_run(agent, status="failed", stop_reason="provider_error", finished_at=now - timedelta(minutes=2))
    ledger_run(agent, finished_at=now - timedelta(minutes=3))
    ledger_run(agent, status="running", stop_reason="")  # still going: not counted
    alert_rules_evaluate(now=now)
    firing = _open(rule)
    assert firing.value == Decimal("66.67") and "2 of 3 runs failed in 1 h (66.67%, threshold 50%)" == firing.summary

    for minute in range(5):
        ledger_run(agent, finished_at=now - timedelta(minutes=minute))
    alert_rules_evaluate(now=now)
    firing.refresh_from_db()
    assert firing.resolved_value == Decimal("25.00")


def test_failure_rate_of_a_model_config_reads_its_model_calls():
    now = timezone.now()
    agent = make_agent()
    rule = make_rule(kind="failure_rate", model_config=agent.model_config, window="hour", threshold=40, min_runs=2)
    run = ledger_run(agent)
    ledger_call(run, started_at=now - timedelta(minutes=2), status="failed", error="HTTP 502")
    ledger_call(run, started_at=now - timedelta(minutes=1))
    measured = alert_rule_measure(rule=rule, now=now)
    assert measured.holds and measured.value == 50 and "1 of 2 model calls failed in 1 h" in measured.summary


def test_stuck_runs_fire_until_the_run_ends():
    now = timezone.now()
    agent = make_agent()
    rule = make_rule(kind="stuck_runs", agent=agent, threshold=30)
    ledger_run(agent, status="queued", stop_reason="", created_at=now - timedelta(minutes=10))
    stuck = ledger_run(agent, status="running", stop_reason="", created_at=now - timedelta(minutes=45))
    ledger_run(make_agent(), status="running", stop_reason="", created_at=now - timedelta(hours=3))  # elsewhere
    alert_rules_evaluate(now=now)
    firing = _open(rule)
    assert firing.value == 45 and firing.summary.startswith("1 run unfinished after 30 min")

    Run.objects.filter(pk=stuck.pk).update(status="failed", finished_at=now)
    alert_rules_evaluate(now=now)
    firing.refresh_from_db()
    assert firing.resolved_at == now and firing.resolved_value == 0


def test_approval_age_fires_on_the_oldest_pending_approval():
    now = timezone.now()
    agent = make_agent()
    rule = make_rule(kind="approval_age", threshold=15)
    approval = pending_approval(agent, created_at=now - timedelta(minutes=10))
    alert_rules_evaluate(now=now)
    assert not _open(rule)
    alert_rules_evaluate(now=now + timedelta(minutes=6))
    assert _open(rule).value == 16

    Approval.objects.filter(pk=approval.pk).update(status="approved")
    alert_rules_evaluate(now=now + timedelta(minutes=7))
    assert not _open(rule) and AlertFiring.objects.get(rule=rule).resolved_value == 0


def test_a_disabled_rule_s_open_firing_is_resolved_unmeasured():
    now = timezone.now()
    rule = make_rule(kind="approval_age", threshold=1)
    pending_approval(make_agent(), created_at=now - timedelta(minutes=5))
    alert_rules_evaluate(now=now)
    AlertRule.objects.filter(pk=rule.pk).update(enabled=False)
    assert alert_rules_evaluate(now=now) == {"evaluated": 0, "fired": 0, "resolved": 1}
    assert AlertFiring.objects.get(rule=rule).resolved_value is None


def test_the_rollups_answer_whole_hours_with_the_ledger_s_numbers():
    now = timezone.now()
    agent = make_agent()
    rule = make_rule(kind="tokens", agent=agent, window="day", threshold=1)
    run = ledger_run(agent)
    for hours_ago in (30, 20, 5, 2, 0):
        ledger_call(run, started_at=now - timedelta(hours=hours_ago, minutes=1), prompt_tokens=100 + hours_ago)
        ledger_run(agent, status="failed", stop_reason="provider_error", finished_at=now - timedelta(hours=hours_ago))
    failure = make_rule(kind="failure_rate", agent=agent, window="day", threshold=1, min_runs=1)
    from_ledger = window_usage(rule=rule, now=now), window_runs(rule=failure, now=now)
    rollups_refresh()
    assert (window_usage(rule=rule, now=now), window_runs(rule=failure, now=now)) == from_ledger
    assert from_ledger[0]["tokens"] == 4 * 20 + 120 + 105 + 102 + 100 and from_ledger[1] == {"ended": 4, "failed": 4}


def test_a_second_evaluation_never_opens_a_second_firing(mailoutbox, django_capture_on_commit_callbacks):
    now = timezone.now()
    rule = make_rule(kind="approval_age", threshold=1, email_to="oncall@example.com")
    pending_approval(make_agent(), created_at=now - timedelta(minutes=5))
    measured = alert_rule_measure(rule=rule, now=now)
    with django_capture_on_commit_callbacks(execute=True):
        first = alert_firing_open(rule=rule, measurement=measured, now=now)
        # The other evaluation measured before this one committed: its insert is refused.
        second = alert_firing_open(rule=rule, measurement=measured, now=now)
    assert first is not None and second is None
    assert AlertFiring.objects.filter(rule=rule).count() == 1 and len(mailoutbox) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_evaluations_open_one_firing():
    if connection.vendor != "postgresql":
        pytest.skip("needs concurrent connections")
    now = timezone.now()
    rule = make_rule(kind="approval_age", threshold=1)
    pending_approval(make_agent(), created_at=now - timedelta(minutes=5))
    start, results = threading.Barrier(4), []

    def evaluate():
        try:
            start.wait()
            results.append(alert_rules_evaluate(now=now)["fired"])
        finally:
            connection.close()

    threads = [threading.Thread(target=evaluate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [0, 0, 0, 1]
    assert AlertFiring.objects.filter(rule=rule).count() == 1
