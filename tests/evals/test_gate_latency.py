"""The release gate's latency threshold: latency is compared with its own threshold, never the
cost one, so the noise between two evaluations of one version on a busy machine blocks nothing."""

import pytest
from django.utils import timezone

from agents.models import Agent
from agents.releases import ReleaseRefused, version_publish
from agents.services import agent_version_current
from evals.models import EvalRun, EvalRunStatus, EvalSuite, ReleaseGate
from tests.support.factories import make_agent

pytestmark = pytest.mark.django_db

METRICS = {"task_completion_rate": 1.0, "tokens_per_task": 1000.0, "cost_per_task": 0.01, "latency_p95_ms": 2000}


def _evaluated(suite, version, **metrics) -> None:
    EvalRun.objects.create(
        suite=suite,
        agent_version=version,
        repetitions=1,
        status=EvalRunStatus.COMPLETED,
        metrics={**METRICS, **metrics},
        finished_at=timezone.now(),
    )


def _published_and_draft(suite):
    agent = make_agent()
    published = agent_version_current(agent=agent)
    Agent.objects.filter(pk=agent.pk).update(published_version=published)
    _evaluated(suite, published)
    Agent.objects.filter(pk=agent.pk).update(system_prompt="Be brief.")
    agent.refresh_from_db()
    return agent, agent_version_current(agent=agent)


def test_a_slower_evaluation_of_the_same_cost_does_not_block_a_release(admin_user):
    suite = EvalSuite.objects.create(name="latency")
    agent, draft = _published_and_draft(suite)
    ReleaseGate.objects.create(agent=agent, suite=suite, max_cost_increase=0.25)
    _evaluated(suite, draft, latency_p95_ms=3400)  # 70 % slower: a busy machine, not a regression

    version_publish(agent=agent, user=admin_user, note="same model, slower machine")

    agent.refresh_from_db()
    assert agent.published_version_id == draft.pk


def test_latency_beyond_its_own_threshold_blocks_a_release(admin_user):
    suite = EvalSuite.objects.create(name="latency")
    agent, draft = _published_and_draft(suite)
    ReleaseGate.objects.create(agent=agent, suite=suite, max_cost_increase=5, max_latency_increase=0.5)
    _evaluated(suite, draft, latency_p95_ms=3400, cost_per_task=0.04)

    with pytest.raises(ReleaseRefused, match="latency_p95_ms") as refused:
        version_publish(agent=agent, user=admin_user, note="slower")
    assert "cost_per_task" not in str(refused.value)
