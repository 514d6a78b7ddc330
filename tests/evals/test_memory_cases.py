"""Eval cases that span conversations of one end user: the earlier conversations run first, each
one's memory extraction made by the collection before the next starts, then the case's own is run
and scored, with checks of what it recalled and what it must not. Every memory an evaluation
writes is in its eval run's own scope: a real end user's memories are never read or written."""

import pytest
from django.core.exceptions import ValidationError

from agents.services import agent_version_current
from conversations.models import LLMCall, Run
from evals import services
from evals.jsonl import case_from_line
from evals.models import EvalCase, EvalResult, EvalRunStatus, EvalSuite
from evals.services import eval_end_user, eval_run_collect, eval_run_start
from memory.models import Memory, MemoryChange, MemoryUse
from memory.services import MemoryProposal, memory_apply
from tests.support.factories import make_user
from tests.support.runs import advance
from workspaces.defaults import default_workspace_id

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = {
    "scenarios": [
        {"match": "我在|我搬到", "steps": [{"content": "好的，记住了。"}]},
        {"match": "天气", "recall": "住在(?P<city>\\S+)", "steps": [{"content": "{city}明天晴。"}]},
        {"match": "天气", "steps": [{"content": "你在哪个城市？"}]},
    ],
    "memory_extraction": {"extract_memory": True},
}
ASK = [{"role": "user", "content": "明天天气如何？"}]


@pytest.fixture
def collected_here(monkeypatch, no_enqueue):
    """The eval run's runs and its collection stay off the broker: the test advances the runs and
    collects itself."""
    monkeypatch.setattr(services, "eval_run_collect_later", lambda **options: None)


def _suite() -> EvalSuite:
    suite = EvalSuite.objects.create(name="memory")
    for position, fields in enumerate(
        [
            {
                "name": "remembers",
                "prior_conversations": [[{"role": "user", "content": "我在成都"}]],
                "answer_contains": "成都",
                "remembered": ["成都"],
            },
            {
                "name": "moved",
                "prior_conversations": [
                    [{"role": "user", "content": "我在成都"}],
                    [{"role": "user", "content": "我搬到重庆了"}],
                ],
                "answer_contains": "重庆",
                "remembered": ["重庆"],
                "forgotten": ["成都"],
            },
        ]
    ):
        case = EvalCase(suite=suite, position=position, turns=ASK, **fields)
        case.full_clean()
        case.save()
    return suite


def _played(eval_run):
    """Advance every queued run of the eval run and collect, until it ends."""
    for _ in range(10):
        for result in EvalResult.objects.filter(eval_run=eval_run, scored=False).select_related("run"):
            if result.run is not None and result.run.status == "queued":
                advance(result.run)
        eval_run = eval_run_collect(eval_run_id=eval_run.pk)
        if eval_run.status != EvalRunStatus.RUNNING:
            return eval_run
    raise AssertionError("the eval run did not end")


def test_a_case_recalls_what_an_earlier_conversation_told_and_forgets_what_changed(
    scripted_agent, fake_llm, collected_here
):
    agent = scripted_agent(SCRIPT, memory_enabled=True)
    # A real end user of the agent, with a memory in its own scope: the evaluation never sees it.
    owner = make_user()
    real = {"scope": f"agent:{agent.pk}", "owner_id": owner.pk, "end_user": "u1"}
    memory_apply(
        workspace_id=default_workspace_id(),
        **real,
        proposals=[MemoryProposal(action="add", kind="fact", statement="住在北京")],
        source="api",
        kinds=["fact"],
        ttl_days=None,
    )
    suite = _suite()

    eval_run = _played(eval_run_start(suite=suite, agent_version=agent_version_current(agent=agent), repetitions=1))

    assert eval_run.status == EvalRunStatus.COMPLETED
    results = {r.case.name: r for r in EvalResult.objects.filter(eval_run=eval_run).select_related("case", "run")}
    remembers, moved = results["remembers"], results["moved"]
    assert remembers.passed and moved.passed, (remembers.checks, moved.checks)
    kinds = [check["kind"] for check in moved.checks]
    assert {"remembered", "forgotten", "earlier_conversations"} <= set(kinds)
    # Conversations of one end user each, in order: the earlier ones, then the scored one.
    assert (remembers.session, len(remembers.earlier_runs)) == (1, 1)
    assert (moved.session, len(moved.earlier_runs)) == (2, 2)
    runs = [Run.objects.get(pk=pk) for pk in moved.earlier_runs] + [moved.run]
    assert len({run.conversation_id for run in runs}) == 3
    assert {run.conversation.end_user for run in runs} == {eval_end_user(case=moved.case, repetition=1)}
    # Each earlier conversation's extraction was made by the collection; the scored one's is not needed.
    assert [LLMCall.objects.filter(run=run, purpose="memory").count() for run in runs] == [1, 1, 0]
    # The scored run was shown the updated memory, not the old one, and answered from it.
    shown = MemoryUse.objects.filter(run=moved.run).values_list("memory__statement", flat=True)
    assert list(shown) == ["住在重庆"]
    # The case's tokens and cost are its three conversations'.
    assert moved.total_tokens == sum(run.total_tokens for run in runs)

    # Every memory it wrote is in the eval run's scope; the real end user's is as it was.
    eval_scope = f"eval:{eval_run.pk}"
    assert set(Memory.objects.exclude(**real).values_list("scope", flat=True)) == {eval_scope}
    assert list(Memory.objects.filter(**real).values_list("statement", flat=True)) == ["住在北京"]
    assert not Memory.objects.filter(scope=f"agent:{agent.pk}").exclude(end_user="u1").exists()
    assert set(MemoryChange.objects.exclude(**real).values_list("scope", flat=True)) == {eval_scope}
    assert not MemoryUse.objects.filter(memory__scope=f"agent:{agent.pk}").exists()


def test_a_version_without_memory_fails_the_recall(scripted_agent, fake_llm, collected_here):
    agent = scripted_agent(SCRIPT)
    suite = _suite()

    eval_run = _played(eval_run_start(suite=suite, agent_version=agent_version_current(agent=agent), repetitions=1))

    result = EvalResult.objects.get(eval_run=eval_run, case__name="remembers")
    assert result.passed is False
    failed = {check["kind"] for check in result.checks if not check["passed"]}
    assert failed == {"remembered", "answer_contains"}
    assert not Memory.objects.exists()
    assert not LLMCall.objects.filter(purpose="memory").exists()


@pytest.mark.parametrize(
    "fields",
    [
        {"prior_conversations": [[{"role": "assistant", "content": "hi"}]]},
        {"prior_conversations": [{"role": "user", "content": "hi"}]},
        {"prior_conversations": [ASK] * 6},
        {"remembered": [""]},
        {"forgotten": "成都"},
        {"forgotten": ["成\x00都"]},
    ],
)
def test_a_malformed_memory_case_is_refused(fields):
    suite = EvalSuite.objects.create(name="bad")
    case = EvalCase(suite=suite, name="c", turns=ASK, **fields)
    with pytest.raises(ValidationError) as raised:
        case.full_clean()
    assert set(raised.value.message_dict) & set(fields)


def test_memory_cases_travel_as_json_lines():
    line = (
        '{"name": "c", "turns": [{"role": "user", "content": "明天天气如何？"}], '
        '"prior_conversations": [[{"role": "user", "content": "我在成都"}]], "remembered": ["成都"], '
        '"forgotten": ["北京"]}'
    )
    data = case_from_line(line, number=1)
    assert data["prior_conversations"] == [[{"role": "user", "content": "我在成都"}]]
    assert (data["remembered"], data["forgotten"]) == (["成都"], ["北京"])
