"""A release gate with online_min_runs: promoting a canary needs that many online scores of the
candidate's live traffic since the canary started, and refuses it when an evaluator's average
on the candidate drops by more than max_rate_drop below the published version's over the same
time; through the promotion service (agents.releases.release_apply)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.releases import ReleaseRefused, release_apply
from agents.services import agent_version_current
from evals.models import EvalRun, EvalRunStatus, EvalSuite, OnlineEvaluator, OnlineScore, ReleaseGate
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db


def _evaluated(suite, version) -> None:
    # A finished eval run with the same metrics on both versions: the suite finds no regression.
    EvalRun.objects.create(
        suite=suite, agent_version=version, status=EvalRunStatus.COMPLETED, metrics={}, finished_at=timezone.now()
    )


def _scores(evaluator, version, values, *, at=None) -> None:
    for value in values:
        run = ledger_run(evaluator.agent)
        row = OnlineScore.objects.create(
            evaluator=evaluator, run=run, agent_version=version, reason="sample", score=value
        )
        if at is not None:
            OnlineScore.objects.filter(pk=row.pk).update(created_at=at)


@pytest.fixture
def canary(admin_user):
    """An agent with a published version and a canary of a changed draft, both evaluated."""
    agent = make_agent()
    suite = EvalSuite.objects.create(name="basics")
    ReleaseGate.objects.create(agent=agent, suite=suite, online_min_runs=4, max_rate_drop=0.1)
    published = agent_version_current(agent=agent)
    _evaluated(suite, published)
    release_apply(agent=agent, user=admin_user, action="publish", note="first")
    agent.refresh_from_db()
    agent.system_prompt = "Be brief."
    agent.save()
    candidate = agent_version_current(agent=agent)
    _evaluated(suite, candidate)
    release_apply(agent=agent, user=admin_user, action="canary_start", percent=20, note="brief")
    agent.refresh_from_db()
    assert agent.canary_version_id == candidate.pk
    evaluator = OnlineEvaluator.objects.create(agent=agent, name="helpful", kind="regex", config={"pattern": "."})
    return agent, evaluator, published, candidate


def test_the_canary_is_promoted_once_its_online_scores_hold(canary, admin_user):
    agent, evaluator, published, candidate = canary
    _scores(evaluator, published, [1.0, 1.0, 0.8, 1.0])
    _scores(evaluator, candidate, [1.0, 0.8, 1.0])
    with pytest.raises(ReleaseRefused, match="needs 4 online scores .* it has 3 so far"):
        release_apply(agent=agent, user=admin_user, action="canary_promote")

    _scores(evaluator, candidate, [0.9])
    release = release_apply(agent=agent, user=admin_user, action="canary_promote")
    agent.refresh_from_db()
    assert release.action == "canary_promote" and agent.published_version_id == candidate.pk


def test_a_canary_whose_online_scores_drop_is_refused(canary, admin_user):
    agent, evaluator, published, candidate = canary
    # Before the canary started: not its time, not compared.
    _scores(evaluator, candidate, [0.0, 0.0], at=timezone.now() - timedelta(days=1))
    _scores(evaluator, published, [1.0, 1.0, 0.9, 1.0])
    _scores(evaluator, candidate, [0.8, 0.7, 0.9, 0.8, None])
    with pytest.raises(ReleaseRefused, match=r"dropping against the published version: helpful \(0.97 → 0.80\)"):
        release_apply(agent=agent, user=admin_user, action="canary_promote")
    agent.refresh_from_db()
    assert agent.published_version_id == published.pk and agent.canary_version_id == candidate.pk

    # Off (0), the same canary goes out.
    ReleaseGate.objects.filter(agent=agent).update(online_min_runs=0)
    release_apply(agent=agent, user=admin_user, action="canary_promote")
    agent.refresh_from_db()
    assert agent.published_version_id == candidate.pk
