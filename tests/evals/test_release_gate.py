"""The release gate through the real queue: publishing and promoting need a finished eval run of
the version going live, and a regression against the published version's refuses them, naming
what regressed; a rollback is never gated."""

import pytest

from agents.releases import (
    ReleaseRefused,
    canary_abort,
    canary_promote,
    canary_start,
    version_publish,
    version_rollback,
)
from agents.services import agent_version_current
from evals.models import EvalRun, ReleaseGate
from evals.services import eval_run_start
from tests.evals.helpers import BROKEN_SCRIPT, SCRIPT, eval_run_finished, four_case_suite
from tests.support.factories import ModelConfigFactory
from tests.support.llm import agent_on

pytestmark = pytest.mark.django_db(transaction=True)


def _evaluated(suite, version) -> EvalRun:
    return eval_run_finished(eval_run_start(suite=suite, agent_version=version, repetitions=1))


def test_the_gate_holds_releases_to_their_eval_runs(worker, fake_llm, admin_user):
    agent = agent_on(fake_llm, SCRIPT, tools=["test-counter", "test-echo"])
    suite = four_case_suite()
    ReleaseGate.objects.create(agent=agent, suite=suite)

    with pytest.raises(ReleaseRefused, match="needs a finished run of eval suite basics"):
        version_publish(agent=agent, user=admin_user, note="first")
    good = agent_version_current(agent=agent)
    _evaluated(suite, good)
    version_publish(agent=agent, user=admin_user, note="first")
    agent.refresh_from_db()
    assert agent.published_version_id == good.pk

    # A draft on a model that answers nothing: a canary may start (that is how it is tried) but
    # not be promoted, first for want of an evaluation, then for what the evaluation found.
    agent.model_config = ModelConfigFactory(
        base_url=fake_llm.api_base, model=fake_llm.script("gate-broken", BROKEN_SCRIPT)
    )
    agent.save()
    canary_start(agent=agent, percent=10, user=admin_user, note="new model")
    agent.refresh_from_db()
    broken = agent.canary_version
    with pytest.raises(ReleaseRefused, match="on the candidate version"):
        canary_promote(agent=agent, user=admin_user)
    _evaluated(suite, broken)
    with pytest.raises(ReleaseRefused, match="regressions against the published version") as refused:
        canary_promote(agent=agent, user=admin_user)
    assert "task_completion_rate" in str(refused.value)
    canary_abort(agent=agent, user=admin_user)
    agent.refresh_from_db()
    with pytest.raises(ReleaseRefused, match="task_completion_rate"):
        version_publish(agent=agent, user=admin_user, note="new model")
    agent.refresh_from_db()
    assert agent.published_version_id == good.pk and agent.canary_version_id is None

    # Tighter or looser is the gate's owner's call: disabled, the same draft goes out; and
    # undoing it is a rollback, which no gate holds up.
    ReleaseGate.objects.filter(agent=agent).update(enabled=False)
    version_publish(agent=agent, user=admin_user, note="new model, gate off")
    ReleaseGate.objects.filter(agent=agent).update(enabled=True)
    agent.refresh_from_db()
    assert agent.published_version_id == broken.pk
    version_rollback(agent=agent, version=good, user=admin_user, note="back")
    agent.refresh_from_db()
    assert agent.published_version_id == good.pk
