"""Alert rules count production traffic, as the dashboards do: the runs of evaluations and forks
(Run.sandbox set) and their model calls are left out, whether a window is read from the ledger
or from the rollups."""

from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.models import AlertFiring
from alerts.selectors import window_runs, window_usage
from alerts.services import alert_rules_evaluate
from conversations.monitoring.rollups import rollups_refresh
from tests.alerts.conftest import make_rule
from tests.support.factories import make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db

EVALUATION = {"results": {}}
FORK = {"fork": "source", "recorded": []}


def _traffic(agent, now):
    """One production run and call; an evaluation's and a fork's, each costly and failed."""
    ledger_call(ledger_run(agent, finished_at=now), started_at=now - timedelta(minutes=5), prompt_tokens=100)
    for sandbox in (EVALUATION, FORK):
        for hours_ago in (0, 3):
            run = ledger_run(
                agent,
                status="failed",
                stop_reason="provider_error",
                finished_at=now - timedelta(hours=hours_ago),
                sandbox=sandbox,
            )
            ledger_call(run, started_at=now - timedelta(hours=hours_ago, minutes=5), prompt_tokens=50_000, cost="9")


@pytest.mark.parametrize("scope", ["agent", "model_config", "everything"])
def test_evaluations_and_forks_do_not_fire_usage_rules(scope):
    now = timezone.now()
    agent = make_agent()
    _traffic(agent, now)
    scoped = {"agent": {"agent": agent}, "model_config": {"model_config": agent.model_config}, "everything": {}}
    rule = make_rule(kind="tokens", window="day", threshold=1000, **scoped[scope])

    assert alert_rules_evaluate(now=now)["fired"] == 0
    assert window_usage(rule=rule, now=now)["tokens"] == 120
    assert not AlertFiring.objects.filter(rule=rule).exists()


def test_evaluations_and_forks_do_not_count_as_failed_runs():
    now = timezone.now()
    agent = make_agent()
    _traffic(agent, now)
    rule = make_rule(kind="failure_rate", agent=agent, window="day", threshold=10, min_runs=1)

    assert window_runs(rule=rule, now=now) == {"ended": 1, "failed": 0}
    assert alert_rules_evaluate(now=now)["fired"] == 0


def test_the_ledger_and_the_rollups_leave_out_the_same_runs():
    now = timezone.now()
    agent = make_agent()
    _traffic(agent, now - timedelta(hours=2))
    usage = make_rule(kind="tokens", agent=agent, window="day", threshold=1)
    failures = make_rule(kind="failure_rate", agent=agent, window="day", threshold=1, min_runs=1)
    from_ledger = window_usage(rule=usage, now=now), window_runs(rule=failures, now=now)

    rollups_refresh()

    assert (window_usage(rule=usage, now=now), window_runs(rule=failures, now=now)) == from_ledger
    assert from_ledger[0]["tokens"] == 120 and from_ledger[1] == {"ended": 1, "failed": 0}
