"""A step starts from what the previous step's commit left instead of reading the run again:
what it carries must be exactly what a read would give, and a cancel accepted before that commit
must still end the run at the step boundary."""

import pytest

from agents.models import GuardrailRule
from conversations.models import LLMCall, Message, ToolInvocation
from conversations.selectors import STEP_RUN_COLUMNS
from engine import loop
from engine.context import step_read
from tests.support.runs import advance, start_run

MESSAGE_FIELDS = ("id", "order", "run_id", "llm_call_id", "role", "content", "tool_calls", "tool_call_id", "name")


def script(*steps) -> dict:
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def _run_fields(run) -> dict:
    fields = {column: getattr(run, column) for column in STEP_RUN_COLUMNS}
    conversation = run.conversation
    return {**fields, "summary": (conversation.context_summary, conversation.context_summary_through)}


def _message_fields(message: Message) -> tuple:
    return tuple(getattr(message, name) for name in MESSAGE_FIELDS) + (message.reasoning or "",)


@pytest.fixture
def compared(monkeypatch):
    """Every step that starts from a carried state also reads the run, and the two must agree."""
    seen = []
    take = loop._step

    def checked(run_id, owner, carried=None):
        if carried is not None:
            run, messages = step_read(run_id=run_id)
            assert _run_fields(carried.run) == _run_fields(run)
            assert [_message_fields(m) for m in carried.messages] == [_message_fields(m) for m in messages]
            seen.append(run_id)
        return take(run_id, owner, carried)

    monkeypatch.setattr(loop, "_step", checked)
    return seen


def test_what_a_step_carries_is_what_a_read_gives(scripted_agent, compared):
    agent = scripted_agent(
        script(
            {
                "tool_calls": [
                    {"name": "test-echo", "arguments": {"text": "one"}},
                    {"name": "test-echo", "arguments": {"text": "two"}},
                ],
                "usage": {"prompt_tokens": 90, "completion_tokens": 7},
            },
            {"tool_calls": [{"name": "test-echo", "arguments": {"text": "three"}}]},
            {"content": "done"},
        ),
        tools=["test-echo"],
    )
    earlier = advance(start_run(agent, "first question"))
    run = advance(start_run(agent, "second question", conversation=earlier.conversation))

    assert (earlier.status, run.status) == ("completed", "completed")
    # Per run, every step: the first starts from what the claim read in its own statement (the
    # second run's read includes the first run's messages), the others from the step before.
    assert compared == [earlier.pk] * 5 + [run.pk] * 5
    assert run.total_tokens > 0 and run.iterations == 3


def test_a_redacted_user_message_is_carried_as_stored(scripted_agent, compared):
    agent = scripted_agent(
        script({"tool_calls": [{"name": "test-echo", "arguments": {"text": "x"}}]}, {"content": "ok"}),
        tools=["test-echo"],
        guardrail_redact_stored=True,
    )
    GuardrailRule.objects.create(agent=agent, side="input", kind="pii_phone", action="redact")

    run = advance(start_run(agent, "call me at 13812345678"))

    # The claim's read, the tool step and the last call: the user message as stored, redacted.
    assert run.status == "completed" and compared == [run.pk] * 3
    assert Message.objects.get(run=run, role="user").content == "call me at [redacted:phone]"


def test_a_cancel_accepted_while_the_steps_last_tool_runs_stops_the_next_model_call(scripted_agent):
    # test-cancel-run asks for its own run's cancel; being the step's only call, nothing else of
    # the step would notice: the step's commit returns the flag, and the next step ends the run.
    agent = scripted_agent(
        script({"tool_calls": [{"name": "test-cancel-run", "arguments": {}}]}, {"content": "done"}),
        tools=["test-cancel-run"],
    )

    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert ToolInvocation.objects.get(run=run).status == "succeeded"
    assert LLMCall.objects.filter(run=run).count() == 1
