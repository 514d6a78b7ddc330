"""A case's answer judged by a rubric: the suite's judge model gives the verdict, recorded as an
LLMCall of purpose judge on the evaluated run; only a well-formed pass passes."""

import json

import pytest
from django.core.exceptions import ValidationError

from agents.services import agent_version_current
from conversations.models import LLMCall
from conversations.selectors import run_timeline
from evals.jsonl import CaseLineInvalid, case_to_line
from evals.judge import verdict_read
from evals.models import EvalCase, EvalResult, EvalRun, EvalSuite
from evals.services import eval_cases_import, eval_run_collect, eval_run_start
from tests.evals.helpers import eval_run_finished
from tests.support.llm import agent_on, fake_model
from tests.support.runs import ask

AGENT_SCRIPT = {
    "scenarios": [
        {"match": "France", "steps": [{"content": "Paris is the capital."}]},
        {"match": "Italy", "steps": [{"content": "Lyon, I believe."}]},
        {"match": "weather", "steps": [{"content": "Sunny all week."}]},
        {"match": "rain", "steps": [{"content": "Rainy tomorrow."}]},
    ],
    "fallback": {"content": "I cannot help with that."},
}

# The judge sees the answer quoted in its user message; the scenario is chosen by it.
JUDGE_SCRIPT = {
    "scenarios": [
        {"match": "Paris is", "steps": [{"content": '{"verdict": "pass", "reason": "names Paris"}'}]},
        {"match": "Lyon", "steps": [{"content": '```json\n{"verdict": "fail", "reason": "wrong city"}\n```'}]},
        {"match": "Sunny", "steps": [{"content": "Looks good to me, pass!"}]},
        {"match": "Rainy", "steps": [{"content": "x", "fault": {"status": 400}}]},
    ],
    "fallback": {"content": '{"verdict": "pass"}'},
}

RUBRICS = {
    "france": ("What is the capital of France?", "Names Paris as the capital."),
    "italy": ("What is the capital of Italy?", "Names Rome as the capital."),
    "weather": ("What is the weather?", "Gives a forecast."),
    "rain": ("Will it rain?", "Says whether it rains."),
}


def _suite(judge) -> EvalSuite:
    suite = EvalSuite.objects.create(name="judged", judge_model_config=judge)
    for position, (name, (question, rubric)) in enumerate(RUBRICS.items()):
        case = EvalCase(
            suite=suite,
            name=name,
            position=position,
            turns=[{"role": "user", "content": question}],
            answer_rubric=rubric,
        )
        case.full_clean()
        case.save()
    return suite


@pytest.mark.django_db(transaction=True)
def test_the_judges_verdict_decides_the_rubric_check(worker, fake_llm):
    agent = agent_on(fake_llm, AGENT_SCRIPT)
    judge = fake_model(fake_llm, JUDGE_SCRIPT)
    suite = _suite(judge)
    eval_run = eval_run_start(suite=suite, agent_version=agent_version_current(agent=agent), repetitions=1)
    eval_run_finished(eval_run)

    results = {r.case.name: r for r in EvalResult.objects.filter(eval_run=eval_run).select_related("case", "run")}
    rubric = {name: next(c for c in r.checks if c["kind"] == "rubric") for name, r in results.items()}
    assert rubric["france"] == {"kind": "rubric", "passed": True, "reason": "pass: names Paris"}
    assert rubric["italy"] == {"kind": "rubric", "passed": False, "reason": "fail: wrong city"}
    assert not rubric["weather"]["passed"] and "could not be read" in rubric["weather"]["reason"]
    assert not rubric["rain"]["passed"] and rubric["rain"]["reason"].startswith("the judge call failed")
    assert {name: r.passed for name, r in results.items()} == {
        "france": True,
        "italy": False,
        "weather": False,
        "rain": False,
    }

    # One judge call per run, on that run, with its tokens; a failed one records the HTTP error.
    for name, result in results.items():
        calls = list(LLMCall.objects.filter(run=result.run, purpose=LLMCall.Purpose.JUDGE))
        assert len(calls) == 1 and calls[0].model_config_id == judge.pk, name
        call = calls[0]
        if name == "rain":
            assert (call.status, call.http_status, call.total_tokens) == ("failed", 400, 0)
        else:
            assert call.status == "succeeded" and call.total_tokens > 0 and call.prompt_tokens > 0
        # The judge's tokens stay out of the run's totals (and so out of the result's).
        run = result.run
        steps = LLMCall.objects.filter(run=run, purpose=LLMCall.Purpose.STEP)
        assert run.total_tokens == sum(c.total_tokens for c in steps) == result.total_tokens

    # The run's timeline lists the judge call last, after the run's own.
    timeline = run_timeline(run=results["france"].run)
    assert timeline[-1]["kind"] == "llm_call" and timeline[-1]["obj"].purpose == "judge"

    # The answer reached the judge as a JSON string, the rubric in its instructions.
    sent = fake_llm.requests(judge.model)
    france = next(r for r in sent if "Paris is" in json.dumps(r))
    body = json.dumps(france)
    assert json.dumps(json.dumps("Paris is the capital."))[1:-1] in body
    assert "Names Paris as the capital." in body

    # Scoring again judges nothing again.
    eval_run_collect(eval_run_id=eval_run.pk)
    assert LLMCall.objects.filter(run__eval_result__eval_run=eval_run, purpose=LLMCall.Purpose.JUDGE).count() == 4


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"verdict": "pass", "reason": "ok"}', (True, "pass: ok")),
        ('```json\n{"verdict": "pass"}\n```', (True, "pass")),
        ('{"verdict": "fail", "reason": "no"}', (False, "fail: no")),
        ("pass", None),
        ('{"verdict": "PASS"}', None),
        ('{"verdict": "pass", "reason": 3}', None),
        ('Sure! {"verdict": "pass"}', None),
        ('["pass"]', None),
        ("", None),
    ],
)
def test_only_a_well_formed_verdict_is_read(answer, expected):
    passed, reason = verdict_read(answer)
    if expected is None:
        assert not passed and reason.startswith("the judge's answer could not be read")
    else:
        assert (passed, reason) == expected


@pytest.mark.django_db
def test_a_rubric_needs_a_judge_model(fake_llm):
    suite = EvalSuite.objects.create(name="no-judge")
    case = EvalCase(suite=suite, name="c", turns=[{"role": "user", "content": "hi"}], answer_rubric="Greets.")
    with pytest.raises(ValidationError) as raised:
        case.full_clean()
    assert "answer_rubric" in raised.value.message_dict

    line = json.dumps({"name": "c", "turns": [{"role": "user", "content": "hi"}], "answer_rubric": "Greets."})
    with pytest.raises(CaseLineInvalid):
        eval_cases_import(suite_name="no-judge", lines=[line])
    assert not suite.cases.exists()

    # With a judge the same line imports, and exports with its rubric.
    suite.judge_model_config = fake_model(fake_llm, JUDGE_SCRIPT)
    suite.save()
    assert eval_cases_import(suite_name="no-judge", lines=[line]) == 1
    assert json.loads(case_to_line(suite.cases.get()))["answer_rubric"] == "Greets."


@pytest.mark.django_db
def test_a_run_without_an_answer_fails_the_rubric_without_asking_the_judge(fake_llm):
    agent = agent_on(fake_llm, {"scenarios": [], "fallback": {"content": "x", "fault": {"status": 400}}})
    run = ask(agent, "What is the capital of France?")
    assert run.status == "failed"
    suite = _suite(fake_model(fake_llm, JUDGE_SCRIPT))
    eval_run = EvalRun.objects.create(suite=suite, agent_version=agent_version_current(agent=agent))
    result = EvalResult.objects.create(eval_run=eval_run, case=suite.cases.get(name="france"), repetition=1, run=run)

    eval_run_collect(eval_run_id=eval_run.pk)
    result.refresh_from_db()
    assert result.scored and not result.passed
    assert {"kind": "rubric", "passed": False, "reason": "the run ended on provider_error, not with an answer"} in (
        result.checks
    )
    assert not LLMCall.objects.filter(run=run, purpose=LLMCall.Purpose.JUDGE).exists()
