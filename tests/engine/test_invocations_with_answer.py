"""The rows of the tool calls an answer asks for are written with the answer (engine.invocations):
the tool step that follows starts with them, and a step taken again finds them."""

import pytest

from conversations.models import LLMCall, Message, ToolInvocation
from engine.invocations import Started
from engine.leases import process_owner, run_claim
from engine.loop import Carried, _step
from engine.next_step import Finish
from platform_site.logs import log_context
from tests.support.llm import echo_script
from tests.support.runs import advance, start_run

ONE_TOOL_STEP = echo_script("one", answer="done: {last_tool_result}")
SAME_CALL_ID_TWICE = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "one"}, "id": "call_same"}]},
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "two"}, "id": "call_same"}]},
                {"content": "done"},
            ],
        }
    ]
}

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _ids_bound_by_steps_end_with_the_test():
    # Steps are taken here without run_advance, whose log context ends the ids they bind (the
    # model call's): without this one they would stay bound for the tests that follow.
    with log_context():
        yield


def _answered(run):
    """Claim the run and take its first step (the model's answer): what that step hands on."""
    owner = process_owner()
    assert run_claim(run_id=run.pk, owner=owner)
    carried = _step(run.pk, owner)
    assert isinstance(carried, Carried)
    return owner, carried


def test_the_answers_commit_writes_its_calls_rows_and_hands_them_on(scripted_agent):
    run = start_run(scripted_agent(ONE_TOOL_STEP, tools=["test-echo"]))
    _, carried = _answered(run)
    [call] = LLMCall.objects.filter(run=run)
    [row] = ToolInvocation.objects.filter(run=run)
    [made] = carried.invocations
    assert made.pk == row.pk and not made._state.adding
    # A read that runs at once: the answer's commit marked it started, with the tool's live state.
    assert (row.llm_call_id, row.status, row.tool_name, row.arguments) == (
        call.pk,
        "running",
        "test-echo",
        {"text": "one"},
    )
    assert row.started_at is not None and carried.started == Started(row.pk, {"is_active": True})
    assert row.tool_call_id == carried.messages[-1].tool_calls[0]["id"]
    assert row.idempotency_key == f"{run.pk}:{row.tool_call_id}"


# Commits: the tool step's batches are each their own transaction (conversations.batch).
@pytest.mark.django_db(transaction=True)
def test_a_tool_step_taken_again_without_them_finds_the_rows_and_runs_each_call_once(scripted_agent):
    run = start_run(scripted_agent(ONE_TOOL_STEP, tools=["test-echo"]))
    owner, _ = _answered(run)
    # As after a crash between the answer's commit and the tool step: the step reads the run again.
    went = _step(run.pk, owner)
    assert isinstance(went, Carried)
    [row] = ToolInvocation.objects.filter(run=run)
    assert (row.status, row.result) == ("succeeded", "one")
    while isinstance(went, Carried) or went is True:  # the rest of the run, on the same lease
        went = _step(run.pk, owner, went if isinstance(went, Carried) else None)
    # The final answer's commit ended the run: only what follows an ending is left (run_finish).
    assert isinstance(went, Finish) and went.made is not None
    run.refresh_from_db()
    assert run.status == "completed"
    assert ToolInvocation.objects.filter(run=run).count() == 1


def test_a_call_id_the_run_used_before_is_not_written_again(scripted_agent):
    run = start_run(scripted_agent(SAME_CALL_ID_TWICE, tools=["test-echo"]))
    assert advance(run).status == "completed"
    # The second answer's row met the first one's (run, tool call id): the step read the first.
    [row] = ToolInvocation.objects.filter(run=run)
    assert (row.tool_call_id, row.result) == ("call_same", "one")
    tool_messages = Message.objects.filter(run=run, role=Message.Role.TOOL).order_by("order")
    assert [m.content for m in tool_messages] == ["one", "one"]
