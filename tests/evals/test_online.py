"""Online evaluation (evals.online): production runs driven in-process through the real engine
and the fake model server. Which runs are picked (a sample, every negatively rated one, every
one with a guardrail hit), once per evaluator and run; what each kind scores; a judge's call kept
out of the run's totals."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.services import agent_version_current
from conversations.feedback import run_feedback_set
from conversations.models import GuardrailTrigger, LLMCall, Run, RunEvent
from evals import online
from evals.erasure import online_scores_erase
from evals.models import OnlineEvaluator, OnlineScore, sample_bound
from evals.online import ONLINE_SCORE_TASK, run_ended_heard, sampled
from evals.online_scoring import online_scores_make, score_read
from memory.forget import _run_copies
from platform_site.celery import app
from tests.support.factories import make_agent
from tests.support.llm import fake_model
from tests.support.runs import advance, ask, start_run

ANSWER = {"scenarios": [{"match": "json", "steps": [{"content": '{"city": "Paris"}'}]}], "fallback": {"content": "ok"}}
JUDGE = {
    "scenarios": [
        {"match": "Paris", "steps": [{"content": '{"score": 0.8, "reason": "names Paris"}'}]},
        {"match": "broken", "steps": [{"content": "x", "fault": {"status": 400}}]},
    ],
    "fallback": {"content": "I think it is fine"},
}


@pytest.fixture
def online_sent(monkeypatch):
    """The online scoring tasks sent after commit, kept off the broker: [(run id, picks)]."""
    sent = []
    monkeypatch.setattr(app.tasks[ONLINE_SCORE_TASK], "delay", lambda run_id, picks: sent.append((run_id, picks)))
    return sent


def _evaluator(agent, **fields) -> OnlineEvaluator:
    values = {"name": "answer", "kind": OnlineEvaluator.Kind.REGEX, "config": {"pattern": "ok"}, **fields}
    evaluator = OnlineEvaluator(agent=agent, **values)
    evaluator.full_clean()
    evaluator.save()
    return evaluator


def _score_sent(sent) -> None:
    for run_id, picks in sent:
        online_scores_make(run_id=run_id, picks=[tuple(pick) for pick in picks])


def test_a_tenth_of_400_production_runs_is_sampled_and_scored(scripted_agent, online_sent):
    agent = scripted_agent(ANSWER)
    evaluator = _evaluator(agent, sample_rate=0.1, on_negative_feedback=False)
    runs = [ask(agent, f"question {i}") for i in range(400)]
    assert all(run.status == "completed" for run in runs)

    assert 0.05 <= len(online_sent) / 400 <= 0.15
    # The decision is a function of the run and the evaluator: heard again, the same runs.
    expected = {str(run.pk) for run in runs if sampled(run_id=run.pk, evaluator=evaluator)}
    assert {run_id for run_id, _picks in online_sent} == expected
    assert all(picks == [[evaluator.pk, "sample"]] for _run_id, picks in online_sent)

    _score_sent(online_sent)
    scores = OnlineScore.objects.filter(evaluator=evaluator)
    assert scores.count() == len(online_sent)
    assert set(scores.values_list("score", "passed", "reason").distinct()) == {(1.0, True, "sample")}
    # A re-delivered task is a no-op: one score per evaluator and run.
    _score_sent(online_sent)
    assert scores.count() == len(online_sent)


def test_only_the_runs_an_evaluator_picks_are_heard(scripted_agent, online_sent, monkeypatch):
    """The ledger's listener hears a run only when an evaluator of its agent would pick it: an
    agent without one, and the runs an evaluator does not sample, cost one EXISTS in the ending."""
    heard = []
    monkeypatch.setattr(online, "run_ended_heard", lambda event: heard.append(event.run_id))
    other = scripted_agent(ANSWER)
    _evaluator(other, sample_rate=1)
    agent = scripted_agent(ANSWER)
    for i in range(5):
        ask(agent, f"question {i}")
    assert heard == []
    evaluator = _evaluator(agent, sample_rate=0.5, on_guardrail_hit=True)
    runs = [ask(agent, f"question {i}") for i in range(20)]
    assert heard == [run.pk for run in runs if sampled(run_id=run.pk, evaluator=evaluator)]
    assert 0 < len(heard) < 20
    # A guardrail hit is heard whatever the sample.
    OnlineEvaluator.objects.filter(pk=evaluator.pk).update(sample_below=sample_bound(0))
    run = start_run(agent, "hello")
    GuardrailTrigger.objects.create(run=run, side="input", rule_id=1, kind="term", action="flag", matched="x")
    advance(run)
    assert heard[-1] == run.pk


def test_hearing_a_run_of_another_agent_is_one_read(scripted_agent, online_sent):
    """Every listener of an ending is called once one hears the run (a webhook of an agent with no
    evaluator): the evaluators' part is then one read, and picks nothing."""
    agent = scripted_agent(ANSWER)
    run = ask(agent, "hello")
    _evaluator(scripted_agent(ANSWER), sample_rate=1)
    ended = RunEvent.objects.get(run=run, type="run.completed")
    with CaptureQueriesContext(connection) as queries:
        run_ended_heard(event=ended)
    assert len(queries) == 1 and online_sent == []


def test_only_production_runs_and_the_evaluator_s_version_are_picked(scripted_agent, online_sent):
    agent = scripted_agent(ANSWER)
    evaluator = _evaluator(agent, sample_rate=1)
    run = ask(agent, "hello")
    assert online_sent == [(str(run.pk), [[evaluator.pk, "sample"]])]
    ended = RunEvent.objects.get(run=run, type="run.completed")

    # An evaluation's, a replay's or a fork's run is sandboxed: never picked.
    Run.objects.filter(pk=run.pk).update(sandbox={"recorded": []})
    run_ended_heard(event=ended)
    Run.objects.filter(pk=run.pk).update(sandbox=None)
    # An evaluator of another version does not check it.
    agent.system_prompt = "A changed prompt."
    agent.save()
    other_version = agent_version_current(agent=agent)
    assert other_version.pk != run.agent_version_id
    OnlineEvaluator.objects.filter(pk=evaluator.pk).update(version=other_version)
    run_ended_heard(event=ended)
    assert len(online_sent) == 1


def test_every_negatively_rated_run_is_scored_once(scripted_agent, online_sent):
    agent = scripted_agent(ANSWER)
    evaluator = _evaluator(agent, sample_rate=0, on_negative_feedback=True)
    silent = _evaluator(agent, name="silent", sample_rate=0, on_negative_feedback=False)
    runs = [ask(agent, f"question {i}") for i in range(20)]
    assert online_sent == []

    for run in runs[:15]:
        run_feedback_set(run=run, rating=-1, comment="wrong", by=None)
    for run in runs[15:]:
        run_feedback_set(run=run, rating=1, comment="", by=None)
    assert len(online_sent) == 15
    _score_sent(online_sent)
    scores = OnlineScore.objects.filter(evaluator=evaluator)
    assert sorted(scores.values_list("run_id", flat=True)) == sorted(run.pk for run in runs[:15])
    assert set(scores.values_list("reason", flat=True)) == {"negative_feedback"}
    assert not OnlineScore.objects.filter(evaluator=silent).exists()

    # The user rates again: a second trigger for the same pair changes nothing.
    run_feedback_set(run=runs[0], rating=-1, comment="still wrong", by=None)
    _score_sent(online_sent[-1:])
    assert scores.count() == 15


def test_a_run_with_a_guardrail_hit_is_scored_by_those_that_check_them(scripted_agent, online_sent):
    agent = scripted_agent(ANSWER)
    watching = _evaluator(agent, sample_rate=0, on_guardrail_hit=True)
    _evaluator(agent, name="blind", sample_rate=0, on_guardrail_hit=False)
    run = start_run(agent, "hello")
    GuardrailTrigger.objects.create(run=run, side="input", rule_id=1, kind="term", action="flag", matched="x")
    advance(run)
    assert online_sent == [(str(run.pk), [[watching.pk, "guardrail"]])]
    _score_sent(online_sent)
    assert OnlineScore.objects.get(run_id=run.pk).reason == "guardrail"


def test_the_rule_kinds_score_one_or_zero(scripted_agent):
    agent = scripted_agent(ANSWER, tools=["test-echo"])
    run = ask(agent, "json please")
    Run.objects.filter(pk=run.pk).update(cost=Decimal("0.002"))
    evaluators = {
        "schema ok": ({"kind": "schema", "config": {"schema": {"type": "object", "required": ["city"]}}}, 1.0),
        "schema bad": ({"kind": "schema", "config": {"schema": {"type": "object", "required": ["country"]}}}, 0.0),
        "regex ok": ({"kind": "regex", "config": {"pattern": "Par+is"}}, 1.0),
        "regex bad": ({"kind": "regex", "config": {"pattern": "^London"}}, 0.0),
        "tool": ({"kind": "tool_used", "config": {"tool": "test-echo"}}, 0.0),
        "fast": ({"kind": "latency", "config": {"max_ms": 600_000}}, 1.0),
        "slow": ({"kind": "latency", "config": {"max_ms": 0}}, 0.0),
        "cheap": ({"kind": "cost", "config": {"max_cost": "0.01"}}, 1.0),
        "dear": ({"kind": "cost", "config": {"max_cost": 0.001}}, 0.0),
    }
    made = {
        name: _evaluator(agent, name=name, sample_rate=0, **fields).pk for name, (fields, _score) in evaluators.items()
    }
    online_scores_make(run_id=run.pk, picks=[(pk, "sample") for pk in made.values()])
    scores = {score.evaluator.name: score for score in OnlineScore.objects.filter(run_id=run.pk)}
    assert {name: scores[name].score for name in evaluators} == {name: s for name, (_f, s) in evaluators.items()}
    assert scores["tool"].explanation == "test-echo called 0 times"
    assert "country" in scores["schema bad"].explanation
    assert all(score.passed == (score.score == 1.0) for score in scores.values())

    # The agent's output schema is the schema of an evaluator without one.
    agent.output_schema = {"type": "array"}
    agent.save()
    own = _evaluator(agent, name="own schema", kind="schema", config={}, sample_rate=0)
    online_scores_make(run_id=run.pk, picks=[(own.pk, "sample")])
    assert OnlineScore.objects.get(evaluator=own).score == 0.0


def test_a_judge_scores_from_its_answer_out_of_the_run_s_totals(scripted_agent, fake_llm):
    agent = scripted_agent(ANSWER)
    judge = _evaluator(
        agent,
        name="judge",
        kind="judge",
        config={},
        judge_model=fake_model(fake_llm, JUDGE),
        rubric="Names the capital.",
        sample_rate=0,
    )
    good, other = ask(agent, "json please"), ask(agent, "anything")
    totals = {run.pk: (run.total_tokens, run.cost, run.iterations) for run in (good, other)}

    online_scores_make(run_id=good.pk, picks=[(judge.pk, "sample")])
    online_scores_make(run_id=other.pk, picks=[(judge.pk, "sample")])

    score = OnlineScore.objects.get(evaluator=judge, run_id=good.pk)
    assert (score.score, score.passed, score.explanation) == (0.8, True, "0.8: names Paris")
    call = LLMCall.objects.get(pk=score.llm_call_id)
    assert (call.run_id, call.purpose, call.status) == (good.pk, "online_judge", "succeeded")
    assert call.total_tokens > 0
    # An answer that is not a score leaves the score empty, saying why.
    unread = OnlineScore.objects.get(evaluator=judge, run_id=other.pk)
    assert unread.score is None and unread.passed is None and "could not be read" in unread.explanation
    for run in (good, other):
        run.refresh_from_db()
        assert (run.total_tokens, run.cost, run.iterations) == totals[run.pk]


def test_a_judge_that_fails_leaves_an_empty_score_once(scripted_agent, fake_llm):
    agent = scripted_agent({"scenarios": [], "fallback": {"content": "broken"}})
    judge = _evaluator(
        agent, kind="judge", config={}, judge_model=fake_model(fake_llm, JUDGE), rubric="r", sample_rate=0
    )
    run = ask(agent, "hello")
    online_scores_make(run_id=run.pk, picks=[(judge.pk, "negative_feedback")])
    online_scores_make(run_id=run.pk, picks=[(judge.pk, "sample")])
    score = OnlineScore.objects.get(evaluator=judge, run_id=run.pk)
    assert score.score is None and score.reason == "negative_feedback"
    assert score.explanation.startswith("the judge call failed")
    assert LLMCall.objects.filter(run=run, purpose="online_judge").count() == 1


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"score": 1, "reason": "good"}', 1.0),
        ('```json\n{"score": 0.25}\n```', 0.25),
        ('{"score": 1.5}', None),
        ('{"score": true}', None),
        ('{"score": "0.5"}', None),
        ("[0.5]", None),
        ("NaN", None),
    ],
)
def test_the_judge_s_answer_is_read_strictly(content, expected):
    assert score_read(content)[0] == expected


@pytest.mark.django_db
def test_an_evaluator_s_configuration_is_checked_per_kind(agent):
    cases = [
        ({"kind": "regex", "config": {}}, "config"),
        ({"kind": "regex", "config": {"pattern": "a{1000000000}"}}, "config"),
        ({"kind": "schema", "config": {"schema": {"type": 3}}}, "config"),
        ({"kind": "tool_used", "config": {"tool": ""}}, "config"),
        ({"kind": "latency", "config": {"max_ms": -1}}, "config"),
        ({"kind": "cost", "config": {"max_cost": "cheap"}}, "config"),
        ({"kind": "latency", "config": {"max_ms": 10, "pattern": "x"}}, "config"),
        ({"kind": "judge", "config": {}}, "judge_model"),
        ({"kind": "judge", "config": {"pass_score": 2}}, "config"),
    ]
    for fields, field in cases:
        with pytest.raises(ValidationError) as refused:
            OnlineEvaluator(agent=agent, name="x", **fields).full_clean()
        assert field in refused.value.message_dict, fields
    OnlineEvaluator(agent=agent, name="x", kind="latency", config={"max_ms": 10}).full_clean()
    other = make_agent()
    with pytest.raises(ValidationError) as refused:
        OnlineEvaluator(
            agent=agent, name="x", kind="latency", config={"max_ms": 10}, version=agent_version_current(agent=other)
        ).full_clean()
    assert "version" in refused.value.message_dict


def test_forgetting_an_end_user_blanks_their_runs_scores_explanations(scripted_agent):
    agent = scripted_agent(ANSWER)
    run, other = ask(agent, "json please"), ask(agent, "hello")
    evaluator = _evaluator(agent, kind="schema", config={"schema": {"type": "array"}}, sample_rate=0)
    online_scores_make(run_id=run.pk, picks=[(evaluator.pk, "sample")])
    online_scores_make(run_id=other.pk, picks=[(evaluator.pk, "sample")])
    assert any(copies.erase is online_scores_erase for copies in _run_copies)

    assert online_scores_erase(run_ids={run.pk}) == {"online_scores_anonymised": 1}
    assert OnlineScore.objects.get(run_id=run.pk).explanation == ""
    assert OnlineScore.objects.get(run_id=run.pk).score == 0.0
    assert OnlineScore.objects.get(run_id=other.pk).explanation != ""
