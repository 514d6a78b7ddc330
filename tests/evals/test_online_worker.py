"""Online evaluation through the real queue: production runs carried by a worker end, the
evaluators' picks are sent after the ending's commit and scored by a worker's task; a judge's
call is an online_judge LLMCall on the run whose tokens and cost stay out of its totals, and a
negative rating posted through the API is scored too."""

import pytest

from conversations.models import LLMCall, Run
from conversations.services import conversation_create
from engine.admission import message_post
from evals.models import OnlineEvaluator, OnlineScore
from tests.support.api import client_for
from tests.support.factories import make_user
from tests.support.llm import agent_on, fake_model
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

SCRIPT = {"scenarios": [], "fallback": {"content": "Paris is the capital of France."}}
JUDGE = {"scenarios": [], "fallback": {"content": '{"score": 0.9, "reason": "correct"}'}}


def test_a_worker_scores_sampled_and_negatively_rated_runs(worker, fake_llm):
    owner = make_user()
    agent = agent_on(fake_llm, SCRIPT, tools=[])
    judge = OnlineEvaluator.objects.create(
        agent=agent,
        name="judge",
        kind="judge",
        judge_model=fake_model(fake_llm, JUDGE),
        rubric="Names the capital.",
        sample_rate=1,
    )
    rule = OnlineEvaluator.objects.create(
        agent=agent, name="short", kind="regex", config={"pattern": "^.{0,10}$"}, sample_rate=0
    )
    runs = [
        message_post(conversation=conversation_create(agent=agent, owner=owner), content=f"capital {i}")
        for i in range(3)
    ]
    wait_for(
        lambda: OnlineScore.objects.filter(evaluator=judge, llm_call__isnull=False).count() == 3,
        timeout=60,
        message="the judge to score every run",
    )
    for run in Run.objects.filter(pk__in=[r.pk for r in runs]):
        score = OnlineScore.objects.get(evaluator=judge, run_id=run.pk)
        assert (score.score, score.passed, score.reason) == (0.9, True, "sample")
        call = LLMCall.objects.get(pk=score.llm_call_id)
        assert call.purpose == "online_judge" and call.run_id == run.pk and call.total_tokens > 0
        steps = LLMCall.objects.filter(run=run, purpose="step")
        # The run's totals are its own calls': the judge's are on its row only.
        assert run.total_tokens == sum(steps.values_list("total_tokens", flat=True))
        assert run.cost == sum(steps.values_list("cost", flat=True))
    assert not OnlineScore.objects.filter(evaluator=rule).exists()

    client = client_for(owner)
    response = client.post(f"/api/v1/runs/{runs[0].pk}/feedback/", {"rating": -1}, format="json")
    assert response.status_code in (200, 201), response.content
    wait_for(
        lambda: OnlineScore.objects.filter(evaluator=rule, run_id=runs[0].pk).exists(),
        timeout=30,
        message="the negative rating to be scored",
    )
    score = OnlineScore.objects.get(evaluator=rule, run_id=runs[0].pk)
    assert (score.score, score.reason) == (0.0, "negative_feedback")
    # The judge had scored that run already: once per evaluator and run.
    assert OnlineScore.objects.filter(evaluator=judge, run_id=runs[0].pk).count() == 1
