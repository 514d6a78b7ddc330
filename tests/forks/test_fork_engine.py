"""Forks driven in-process (engine.forks.run_fork, then the loop as a worker would take it): each
kind of change, the copied rows, the write tool's rules with the counting service as witness,
determinism on the fake model, forks of forks, refusals, and what a fork stays out of."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from agents.models import Agent
from bench.chaos_setup import WRITE_TOOL
from conversations.models import Approval, ForkChange, LLMCall, Message, Run, ToolInvocation
from conversations.monitoring.models import RunHourly
from conversations.monitoring.rollups import rollups_refresh
from conversations.services import conversation_create
from engine.approvals import approval_decide
from engine.forks import ForkInvalid, ForkNotAllowed, ForkRequest, run_fork
from engine.invocations import REAL_WRITE_REASON
from engine.memory import MEMORY_OPEN, memory_extract
from engine.runs import run_cancel
from memory.models import Memory
from tests.engine.test_memory_recall import remembered
from tests.forks.conftest import booking_agent, booking_script
from tests.support.llm import fake_model
from tests.support.runs import advance, last_answer, start_run
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db


def _booked(agent, content: str = "order 7") -> Run:
    run = advance(start_run(agent, content, conversation_create(agent=agent)))
    assert run.status == "completed", run.error
    return run


def _fork(source: Run, user, **request) -> Run:
    fork = advance(run_fork(source=source, request=ForkRequest(**request), user=user))
    return fork


def _messages(run: Run) -> list[tuple]:
    """What the run said and did, message by message (tool call ids included: the fake model's
    are a digest of the conversation, so equal ids mean the model saw the same messages)."""
    rows = Message.objects.filter(run=run).order_by("order")
    return [
        (
            m.role,
            m.content,
            [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m.tool_calls or []],
            m.tool_call_id,
        )
        for m in rows
    ]


def _invocations(run: Run) -> list[tuple]:
    rows = ToolInvocation.objects.filter(run=run).order_by("llm_call__iteration", "position")
    return [(i.tool_name, i.arguments, i.status, i.result) for i in rows]


def _write(run: Run) -> ToolInvocation:
    return ToolInvocation.objects.get(run=run, tool_name=WRITE_TOOL)


@pytest.fixture
def source(fake_llm, counting):
    run = _booked(booking_agent(fake_llm, counting))
    assert counting.keys() == 1 and run.iterations == 3
    return run


def test_a_fork_with_no_change_reproduces_its_source_step_for_step(source, boss, counting):
    for step in (1, 2, 3):
        fork = _fork(source, boss, step=step)
        assert fork.status == "completed" and fork.stop_reason == source.stop_reason, fork.error
        assert _messages(fork) == _messages(source)
        assert _invocations(fork) == _invocations(source)
        assert last_answer(fork) == last_answer(source) == "Booked order 7: 1"
        assert (fork.forked_from_id, fork.fork_step, fork.fork_change["kind"]) == (source.pk, step, "none")
        assert fork.fork_change["by_id"] == boss.pk and fork.fork_change["real_writes"] is False
        # The write, copied or made again, was never booked again.
        write = _write(fork)
        assert write.copied == (step > 1) and write.simulated == (step == 1)
    assert counting.keys() == 1 and counting.tally.summary()["requests"] == 1


def test_copied_rows_cost_nothing_and_the_fork_counts_only_its_own_calls(source, boss):
    fork = _fork(source, boss, step=3)
    calls = list(LLMCall.objects.filter(run=fork).order_by("iteration"))
    assert [(c.iteration, c.copied) for c in calls] == [(1, True), (2, True), (3, False)]
    for copied in calls[:2]:
        assert copied.total_tokens == copied.prompt_tokens == copied.completion_tokens == 0 and copied.cost == 0
    assert calls[2].total_tokens > 0
    assert fork.total_tokens == calls[2].total_tokens and fork.cost == calls[2].cost
    assert fork.iterations == 3
    copied = ToolInvocation.objects.filter(run=fork)
    assert all(i.copied for i in copied) and copied.count() == 2
    assert {i.idempotency_key.split(":")[0] for i in copied} == {str(fork.pk)}


def test_a_fork_at_step_one_counts_every_call_it_makes(source, boss):
    fork = _fork(source, boss, step=1)
    calls = LLMCall.objects.filter(run=fork)
    assert not calls.filter(copied=True).exists() and calls.count() == 3
    assert fork.total_tokens == sum(c.total_tokens for c in calls) > 0


def test_a_version_change_runs_the_draft_or_a_past_version(fake_llm, counting, boss):
    agent = booking_agent(fake_llm, counting, system_prompt="You book orders.")
    source = _booked(agent)
    first = source.agent_version
    # The draft now: another prompt, and a description that no longer says the tool books orders.
    Agent.objects.filter(pk=agent.pk).update(system_prompt="You are terse.")
    ToolDefinition.objects.filter(name=WRITE_TOOL).update(description="Posts something somewhere.")

    draft = _fork(source, boss, step=1, change=ForkChange.VERSION, version="draft")
    assert draft.agent_version.number == first.number + 1 == draft.fork_change["version"]
    assert last_answer(draft) == "I do not know how to book."
    [call] = LLMCall.objects.filter(run=draft)
    assert call.request["messages"][0]["content"].startswith("You are terse.")

    past = _fork(draft, boss, step=1, change=ForkChange.VERSION, version=str(first.number))
    assert past.agent_version == first and past.fork_change["version"] == first.number
    assert last_answer(past) == "Booked order 7: 1"
    assert LLMCall.objects.filter(run=past).first().request["messages"][0]["content"].startswith("You book orders.")
    assert counting.keys() == 1


def test_a_model_change_runs_another_model_config(fake_llm, source, boss):
    other = fake_model(fake_llm, booking_script(answer="Other model: order {n} is in."))
    fork = _fork(source, boss, step=3, change=ForkChange.MODEL, model_config_id=other.pk)
    assert fork.fork_change["model_config_id"] == other.pk and fork.fork_change["model"] == other.model
    assert last_answer(fork) == "Other model: order 7 is in."
    new = LLMCall.objects.get(run=fork, copied=False)
    assert new.model_name == other.model and new.model_config_id == other.pk
    # The copied steps keep the model that made them.
    assert set(LLMCall.objects.filter(run=fork, copied=True).values_list("model_name", flat=True)) == {
        source.agent_version.snapshot["model"]["model"]
    }


def test_an_edited_tool_result_changes_what_the_model_says_next(source, boss, counting):
    write = _write(source)
    fork = _fork(
        source, boss, step=1, change=ForkChange.TOOL_RESULT, tool_call_id=write.tool_call_id, result="sold out"
    )
    assert fork.status == "completed" and last_answer(fork) == "Could not book order 7: sold out."
    edited = _write(fork)
    assert (edited.result, edited.simulated, edited.copied, edited.status) == ("sold out", True, True, "succeeded")
    assert Message.objects.get(run=fork, role="tool", tool_call_id=write.tool_call_id).content == "sold out"
    assert list(LLMCall.objects.filter(run=fork).values_list("iteration", "copied").order_by("iteration")) == [
        (1, True),
        (2, False),
    ]
    assert fork.fork_change == {
        "kind": "tool_result",
        "tool_call_id": write.tool_call_id,
        "result": "sold out",
        "real_writes": False,
        "by": boss.get_username(),
        "by_id": boss.pk,
    }
    assert counting.keys() == 1


def test_an_edited_result_of_a_later_step(source, boss):
    echo = ToolInvocation.objects.get(run=source, tool_name="test-echo")
    fork = _fork(source, boss, step=2, change=ForkChange.TOOL_RESULT, tool_call_id=echo.tool_call_id, result='{"x": 1}')
    assert last_answer(fork) == "Booked order 7: 1"  # the answer reads the write's result, kept
    assert ToolInvocation.objects.get(run=fork, tool_name="test-echo").result == '{"x": 1}'


def test_an_edited_user_message_without_a_write_result_fails_the_new_write_without_calling(source, boss, counting):
    fork = _fork(source, boss, step=1, change=ForkChange.USER_MESSAGE, message="order 8")
    assert fork.status == "completed"
    assert Message.objects.get(run=fork, role="user").content == "order 8"
    write = _write(fork)
    assert write.status == "error" and write.error == "not run in a fork" and not write.simulated
    assert write.arguments == {"order": "8"}
    assert counting.keys() == 1 and counting.tally.summary()["requests"] == 1


def test_an_operator_result_for_a_new_write_is_recorded_as_simulated(source, boss, counting):
    given = '{"recorded": 42}'
    fork = _fork(
        source, boss, step=1, change=ForkChange.USER_MESSAGE, message="order 8", write_results={WRITE_TOOL: given}
    )
    write = _write(fork)
    assert (write.status, write.result, write.simulated) == ("succeeded", given, True)
    assert last_answer(fork) == "Booked order 8: 42"
    assert fork.fork_change["write_results"] == {WRITE_TOOL: given}
    assert counting.keys() == 1


def test_real_writes_wait_for_an_approval_and_book_once_with_the_forks_key(source, boss, counting):
    fork = _fork(source, boss, step=1, change=ForkChange.USER_MESSAGE, message="order 8", real_writes=True)
    assert fork.status == "awaiting_approval"
    approval = Approval.objects.get(run=fork)
    assert approval.request_reason == REAL_WRITE_REASON
    assert counting.keys() == 1
    approval_decide(approval_id=approval.pk, user=boss, decision="approve", channel="api")
    fork = advance(fork)
    assert fork.status == "completed", fork.error
    write = _write(fork)
    assert write.status == "succeeded" and not write.simulated
    assert write.idempotency_key == f"{fork.pk}:{write.tool_call_id}"
    assert counting.keys() == 2 and counting.per_key()[write.idempotency_key] == 1

    # A fork of that fork never books order 8 again: the real write is recorded.
    again = _fork(fork, boss, step=1)
    assert again.status == "completed" and _write(again).simulated
    assert not Approval.objects.filter(run=again).exists()
    assert counting.keys() == 2


def test_a_rejected_real_write_never_books(source, boss, counting):
    fork = _fork(source, boss, step=1, change=ForkChange.USER_MESSAGE, message="order 9", real_writes=True)
    approval_decide(approval_id=Approval.objects.get(run=fork).pk, user=boss, decision="reject", channel="api")
    fork = advance(fork)
    assert fork.status == "completed" and _write(fork).status == "rejected"
    assert counting.keys() == 1 and counting.tally.summary()["requests"] == 1


def test_a_same_write_with_real_writes_allowed_still_gets_its_recorded_result(source, boss, counting):
    fork = _fork(source, boss, step=1, real_writes=True)
    assert fork.status == "completed" and _write(fork).simulated
    assert not Approval.objects.filter(run=fork).exists() and counting.keys() == 1


def test_forks_of_forks(source, boss, counting):
    given = '{"recorded": 5}'
    first = _fork(
        source, boss, step=1, change=ForkChange.USER_MESSAGE, message="order 8", write_results={WRITE_TOOL: given}
    )
    for step in (1, 2, 3):
        second = _fork(first, boss, step=step)
        assert second.forked_from == first and second.status == "completed"
        assert _messages(second) == _messages(first) and _invocations(second) == _invocations(first)
    # The operator's results carry on into forks of the fork.
    assert second.sandbox["results"] == {WRITE_TOOL: given}
    assert counting.keys() == 1


def test_a_run_that_has_not_ended_cannot_be_forked(fake_llm, counting, boss):
    run = advance(start_run(booking_agent(fake_llm, counting, approval="always"), "order 7"))
    assert run.status == "awaiting_approval"
    with pytest.raises(ForkInvalid, match="has ended"):
        run_fork(source=run, request=ForkRequest(step=1), user=boss)


def test_an_unfinished_step_cannot_be_copied(fake_llm, counting, boss):
    run = advance(start_run(booking_agent(fake_llm, counting, approval="always"), "order 7"))
    run_cancel(run=run)
    run.refresh_from_db()
    assert run.status == "cancelled"
    call_id = _write(run).tool_call_id
    with pytest.raises(ForkInvalid, match="did not finish"):
        run_fork(
            source=run, request=ForkRequest(step=1, change="tool_result", tool_call_id=call_id, result="x"), user=boss
        )
    # From its first step it can: nothing is copied.
    fork = _fork(run, boss, step=1)
    assert fork.status == "completed" and _write(fork).simulated is False


@pytest.mark.parametrize(
    "request_fields,message",
    [
        ({"step": 0}, "whole number"),
        ({"step": True}, "whole number"),
        ({"step": 4}, "step 4 does not exist"),
        ({"step": 1, "change": "weird"}, "Unknown change"),
        ({"step": 2, "change": "tool_result", "tool_call_id": "nope", "result": "x"}, "made no tool call"),
        ({"step": 2, "change": "tool_result"}, "tool call id"),
        ({"step": 1, "change": "user_message", "message": "  "}, "empty"),
        ({"step": 2, "change": "user_message", "message": "order 1"}, "step 1"),
        ({"step": 1, "change": "version", "version": 99}, "no version 99"),
        ({"step": 1, "change": "version", "version": "nope"}, "no version nope"),
        ({"step": 1, "change": "version", "version": "published"}, "never been published"),
        ({"step": 1, "change": "version"}, "Say which version"),
        ({"step": 1, "change": "model", "model_config_id": 0}, "no model config 0"),
        ({"step": 1, "change": "model", "model_config_id": "x"}, "no model config x"),
        ({"step": 1, "change": "model"}, "no model config None"),
        ({"step": 1, "write_results": {"x": 1}}, "Write results"),
    ],
)
def test_a_fork_asked_wrongly_is_refused(source, boss, request_fields, message):
    with pytest.raises(ForkInvalid, match=message):
        run_fork(source=source, request=ForkRequest(**request_fields), user=boss)
    assert not Run.objects.filter(forked_from=source).exists()


def test_an_edited_call_must_belong_to_the_step(source, boss):
    write = _write(source)
    with pytest.raises(ForkInvalid, match="Step 2 made no tool call"):
        run_fork(
            source=source,
            request=ForkRequest(step=2, change="tool_result", tool_call_id=write.tool_call_id, result="x"),
            user=boss,
        )


def test_a_user_who_may_not_use_the_agent_may_not_fork_its_runs(source):
    agent = source.agent
    members = Group.objects.create(name="bookers")
    agent.allowed_groups.add(members)
    outsider = get_user_model().objects.create_user("outsider")
    with pytest.raises(ForkNotAllowed):
        run_fork(source=source, request=ForkRequest(step=1), user=outsider)
    insider = get_user_model().objects.create_user("insider")
    insider.groups.add(members)
    fork = _fork(source, insider, step=1)
    assert fork.status == "completed" and fork.conversation.owner == insider


def test_a_fork_neither_recalls_nor_extracts_memories(
    scripted_agent, fake_llm, boss, django_capture_on_commit_callbacks
):
    script = {
        "scenarios": [{"match": ".", "steps": [{"content": "noted"}]}],
        "memory_extraction": {"content": '{"changes": [{"action": "add", "kind": "fact", "statement": "likes tea"}]}'},
    }
    agent = scripted_agent(script, memory_enabled=True)
    remembered(agent, boss, "u1", "lives in Chengdu")
    source = advance(start_run(agent, "I like tea", conversation_create(agent=agent, owner=boss, end_user="u1")))
    assert MEMORY_OPEN in str(LLMCall.objects.get(run=source).request)
    with django_capture_on_commit_callbacks(execute=True):
        fork = _fork(source, boss, step=1)
    assert fork.status == "completed"
    assert MEMORY_OPEN not in str(LLMCall.objects.get(run=fork).request)
    assert memory_extract(run_id=fork.pk) is None
    assert not LLMCall.objects.filter(run=fork, purpose="memory").exists()
    assert list(Memory.objects.values_list("statement", flat=True)) == ["lives in Chengdu"]


def test_forks_stay_out_of_the_monitoring_rollups(source, boss):
    _fork(source, boss, step=1)
    _fork(source, boss, step=2)
    rollups_refresh()
    assert sum(RunHourly.objects.filter(agent=source.agent).values_list("runs", flat=True)) == 1


def test_a_write_a_fork_refused_is_no_recorded_result_for_its_forks(source, boss, counting):
    refused = _fork(source, boss, step=1, change=ForkChange.USER_MESSAGE, message="order 8")
    assert _write(refused).error == "not run in a fork"
    given = _fork(refused, boss, step=1, write_results={WRITE_TOOL: '{"recorded": 3}'})
    assert (_write(given).result, _write(given).simulated) == ('{"recorded": 3}', True)
    asked = _fork(refused, boss, step=1, real_writes=True)
    assert asked.status == "awaiting_approval" and counting.keys() == 1


def test_a_run_whose_next_model_call_failed_is_forked_there_with_another_model(fake_llm, counting, boss):
    """The model failed after the booking: the run ended without step 2's answer. Forking at
    step 2 with another model retries exactly that, with the booking copied, not made again."""
    failing = booking_script()
    failing["scenarios"][0]["steps"][1] = {"fault": {"status": 400}}
    agent = booking_agent(fake_llm, counting, script=failing)
    source = advance(start_run(agent, "order 7", conversation_create(agent=agent)))
    assert source.stop_reason == "provider_error" and counting.keys() == 1
    other = fake_model(fake_llm, booking_script(answer="Retried: order {n} is in."))

    fork = _fork(source, boss, step=2, change=ForkChange.MODEL, model_config_id=other.pk)
    assert fork.status == "completed", fork.error
    assert last_answer(fork) == "Retried: order 7 is in."
    assert _write(fork).copied and counting.keys() == 1
    # Past the step that never answered there is nothing to fork from.
    with pytest.raises(ForkInvalid):
        run_fork(source=source, request=ForkRequest(step=3), user=boss)
