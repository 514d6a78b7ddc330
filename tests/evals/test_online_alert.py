"""The online_score alert rule: the average online score of an agent's runs over the window
falling below the threshold fires (with enough scores to mean something) and resolves once it is
back; measured by the evals app through the alerts' registry, per workspace."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from alerts.models import AlertFiring, AlertRule
from alerts.selectors import alert_rule_measure
from alerts.services import alert_rules_evaluate
from evals.models import OnlineEvaluator, OnlineScore
from tests.alerts.conftest import make_rule
from tests.support.factories import AgentFactory, ModelConfigFactory, make_agent
from tests.support.ledger import ledger_run
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


def _scored(evaluator: OnlineEvaluator, score: float | None, *, at) -> OnlineScore:
    run = ledger_run(evaluator.agent)
    row = OnlineScore.objects.create(
        evaluator=evaluator, run=run, agent_version_id=run.agent_version_id, reason="sample", score=score
    )
    OnlineScore.objects.filter(pk=row.pk).update(created_at=at)
    return row


def _agent(workspace: Workspace, tag: str):
    model = ModelConfigFactory(workspace=workspace, name=f"model-{tag}")
    return AgentFactory(workspace=workspace, model_config=model, slug=f"agent-{tag}")


def _evaluator(agent) -> OnlineEvaluator:
    return OnlineEvaluator.objects.create(agent=agent, name="tone", kind="regex", config={"pattern": "."})


def test_a_dropping_online_score_fires_and_resolves():
    now = timezone.now()
    agent, other = make_agent(), make_agent()
    rule = make_rule(kind="online_score", agent=agent, window="hour", threshold="0.7", min_runs=3)
    mine, theirs = _evaluator(agent), _evaluator(other)
    for _ in range(4):
        _scored(theirs, 0.0, at=now - timedelta(minutes=5))  # another agent's: not counted
    _scored(mine, 0.0, at=now - timedelta(minutes=90))  # outside the hour
    _scored(mine, 0.5, at=now - timedelta(minutes=20))
    _scored(mine, None, at=now - timedelta(minutes=15))  # a judge that could not answer: no score
    _scored(mine, 0.6, at=now - timedelta(minutes=10))
    # Below the threshold, but fewer scores than min_runs.
    assert alert_rules_evaluate(now=now)["fired"] == 0

    _scored(mine, 0.7, at=now - timedelta(minutes=1))
    assert alert_rules_evaluate(now=now) == {"evaluated": 1, "fired": 1, "resolved": 0}
    firing = AlertFiring.objects.get(rule=rule, resolved_at__isnull=True)
    assert str(firing.value) == "0.60000000"
    assert firing.summary == "average online score 0.6 over 3 scores in 1 h (fires below 0.7)"

    # The window slides past the bad scores; good ones come in.
    for _ in range(3):
        _scored(mine, 1.0, at=now + timedelta(minutes=50))
    assert alert_rules_evaluate(now=now + timedelta(minutes=55))["resolved"] == 1
    assert not AlertFiring.objects.filter(rule=rule, resolved_at__isnull=True).exists()


def test_a_rule_on_everything_counts_its_workspace_s_agents_only():
    now = timezone.now()
    alpha, bravo = (
        Workspace.objects.create(name="Alpha", slug="alpha"),
        Workspace.objects.create(name="Bravo", slug="bravo"),
    )
    rule = make_rule(workspace=alpha, kind="online_score", window="day", threshold="0.5", min_runs=1)
    _scored(_evaluator(_agent(alpha, "alpha")), 0.25, at=now - timedelta(hours=3))
    _scored(_evaluator(_agent(bravo, "bravo")), 1.0, at=now - timedelta(hours=2))
    measurement = alert_rule_measure(rule=rule, now=now)
    assert measurement.holds and str(measurement.value) == "0.2500"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"threshold": "1.5"}, "threshold"),
        ({"threshold": "0.5", "min_runs": 0}, "min_runs"),
    ],
)
def test_a_rule_out_of_range_is_refused(fields, field):
    with pytest.raises(ValidationError) as refused:
        make_rule(kind=AlertRule.Kind.ONLINE_SCORE, **fields)
    assert field in refused.value.message_dict
