"""An agent's retention policy purges an eval run's old runs like any others; the scores stay,
and a run purged before it was scored is scored as failed."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.services import agent_version_current
from conversations.models import Run
from engine.retention import retention_sweep
from evals.models import EvalResult, EvalRun, EvalRunStatus
from evals.services import eval_run_collect
from tests.evals.helpers import four_case_suite
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db


def test_purged_runs_leave_the_scores(no_enqueue):
    agent = make_agent(retention_days=30)
    suite = four_case_suite()
    eval_run = EvalRun.objects.create(suite=suite, agent_version=agent_version_current(agent=agent))
    old = timezone.now() - timedelta(days=60)
    cases = list(suite.cases.all())
    scored = ledger_run(agent, finished_at=old, created_at=old)
    EvalResult.objects.create(eval_run=eval_run, case=cases[0], repetition=1, run=scored)
    for case in cases[1:]:
        running = ledger_run(agent, status="running", stop_reason="", finished_at=None)
        EvalResult.objects.create(eval_run=eval_run, case=case, repetition=1, run=running)
    assert eval_run_collect(eval_run_id=eval_run.pk).status == EvalRunStatus.RUNNING  # one scored
    Run.objects.filter(status="running").update(status="completed", stop_reason="final_answer", finished_at=old)
    Run.objects.filter(agent=agent).update(created_at=old)

    retention_sweep()

    assert not Run.objects.filter(agent=agent).exists()
    eval_run = eval_run_collect(eval_run_id=eval_run.pk)
    assert eval_run.status == EvalRunStatus.COMPLETED
    results = {r.case.name: r for r in EvalResult.objects.filter(eval_run=eval_run).select_related("case")}
    assert results["apples"].run_id == scored.pk and results["apples"].checks[0]["kind"] == "finished"
    assert [c["reason"] for c in results["pears"].checks] == ["the run was purged before it was scored"]
    assert eval_run.metrics["results"] == 4
