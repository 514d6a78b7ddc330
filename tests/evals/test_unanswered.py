"""A run that ended on a limit or an error ends with the platform's own message ("I stopped here:
…"), not the agent's answer: its answer checks fail saying so, and no judge is asked about it."""

import pytest
from django.utils import timezone

from conversations.models import LLMCall
from conversations.services import messages_append
from evals.models import EvalCase, EvalResult, EvalRun, EvalRunStatus, EvalSuite
from evals.scoring import Observation, score_run
from evals.services import eval_run_collect
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run
from tests.support.llm import fake_model

STOP_MESSAGE = "I stopped here: this task needed more than 3 model steps, which is this agent's limit."
# A judge that passes anything it is asked about.
LENIENT_JUDGE = {"scenarios": [], "fallback": {"content": '{"verdict": "pass", "reason": "fine"}'}}


def test_answer_checks_of_a_run_stopped_by_a_limit_fail_with_the_reason():
    observed = Observation(stop_reason="max_iterations", answer=STOP_MESSAGE)
    expectations = {"answer_contains": "stopped", "answer_pattern": "^I stopped", "answer_schema": {"type": "string"}}
    checks = score_run(expectations, observed)
    said = "the run ended on max_iterations, not with an answer"
    assert checks == [
        {"kind": "finished", "passed": False, "reason": "ended without an answer (max_iterations)"},
        {"kind": "answer_contains", "passed": False, "reason": said},
        {"kind": "answer_pattern", "passed": False, "reason": said},
        {"kind": "answer_schema", "passed": False, "reason": said},
    ]
    # The same answer, given as the agent's own, is matched.
    answered = score_run(expectations, Observation(stop_reason="final_answer", answer='"I stopped"'))
    assert [check["passed"] for check in answered] == [True, True, False, True]


@pytest.mark.django_db
def test_the_judge_is_not_asked_about_a_stop_message(fake_llm):
    suite = EvalSuite.objects.create(name="judged", judge_model_config=fake_model(fake_llm, LENIENT_JUDGE))
    case = EvalCase.objects.create(
        suite=suite, name="c", turns=[{"role": "user", "content": "plan my trip"}], answer_rubric="Plans a trip."
    )
    now = timezone.now()
    run = ledger_run(make_agent(), stop_reason="max_iterations", created_at=now, finished_at=now)
    messages_append(
        conversation_id=run.conversation_id, run_id=run.pk, messages=[{"role": "assistant", "content": STOP_MESSAGE}]
    )
    eval_run = EvalRun.objects.create(suite=suite, agent_version=run.agent_version)
    result = EvalResult.objects.create(eval_run=eval_run, case=case, repetition=1, run=run)

    assert eval_run_collect(eval_run_id=eval_run.pk).status == EvalRunStatus.COMPLETED
    result.refresh_from_db()
    assert not result.passed
    assert {"kind": "rubric", "passed": False, "reason": "the run ended on max_iterations, not with an answer"} in (
        result.checks
    )
    assert not LLMCall.objects.filter(run=run, purpose=LLMCall.Purpose.JUDGE).exists()
