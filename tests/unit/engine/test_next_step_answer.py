"""The decision made with a model's answer, before the commit that records it (engine.next_step,
`answered`): what follows the answer, and whether that commit may mark the first tool call
started. Plain objects in, a decision out: any query would fail the test (the unit tier)."""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from conversations.models import Message, StopReason
from engine.next_step import Finish, RunTools, next_step

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RUN_ID = uuid.uuid4()
OBJECT = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@dataclass
class RunRow:
    """The run fields the decision reads, as the step has them when the answer arrives."""

    pk: uuid.UUID = RUN_ID
    cancel_requested: bool = False
    deadline: datetime | None = None
    iterations: int = 1
    total_tokens: int = 0
    cost: Decimal = Decimal(0)
    agent_id: int = 1
    children_tokens: int = 0
    children_cost: Decimal = Decimal(0)
    sandbox: dict | None = None
    output_schema: dict | None = None


def tool(name: str, *, policy: str = "never", kind: str = "python", side_effect: str = "read") -> dict:
    return {
        "id": 7,
        "name": name,
        "kind": kind,
        "side_effect": side_effect,
        "idempotent": False,
        "parameters": OBJECT,
        "approval": {"policy": policy, "rule": "", "timeout_seconds": 0},
    }


def snapshot(*tools, streak: int = 3) -> dict:
    agent = {
        "max_iterations": 5,
        "max_same_tool_streak": streak,
        "run_timeout_seconds": 60,
        "time_zone": "Asia/Shanghai",
        "run_token_budget": 100,
        "run_cost_budget": None,
        "daily_token_budget": None,
        "daily_cost_budget": None,
    }
    return {"agent": agent, "model": {}, "fallback_model": None, "tools": list(tools) or [tool("get-weather")]}


def calls(name: str = "get-weather", arguments: str = '{"city": "Beijing"}', call_id: str = "call_1") -> list[dict]:
    return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]


def user() -> Message:
    return Message(run_id=RUN_ID, role=Message.Role.USER, content="What is the weather in Beijing?")


def answer(tool_calls=None, text: str = "") -> Message:
    return Message(run_id=RUN_ID, role=Message.Role.ASSISTANT, content=text, tool_calls=tool_calls)


def result(call_id: str = "call_1") -> Message:
    return Message(run_id=RUN_ID, role=Message.Role.TOOL, content="sunny", tool_call_id=call_id)


def decided(messages, snap=None, run=None, **kwargs):
    return next_step(run or RunRow(), messages, snap or snapshot(), now=NOW, answered=True, **kwargs)


def test_a_call_that_runs_at_once_is_started_by_the_answer_s_commit():
    asked = answer(calls())
    decision = decided([user(), asked])
    assert decision == RunTools(asked, start_first=True)


def test_the_same_messages_read_later_leave_the_mark_to_the_tool_step():
    asked = answer(calls())
    decision = next_step(RunRow(), [user(), asked], snapshot(), now=NOW)
    assert decision == RunTools(asked, start_first=False)


def test_a_call_that_waits_for_a_person_or_cannot_run_is_not_started_with_the_answer():
    cases = [
        (snapshot(tool("get-weather", policy="always")), calls()),  # an approval first
        (snapshot(tool("ask-agent", kind="agent")), calls("ask-agent")),  # a child run
        (snapshot(), calls(arguments='{"town": 1}')),  # invalid arguments: the model reads why
        (snapshot(), calls("no-such-tool")),  # not the agent's tool
    ]
    for snap, asked in cases:
        decision = decided([user(), answer(asked)], snap)
        assert isinstance(decision, RunTools) and not decision.start_first, asked


def test_an_evaluation_s_run_or_a_run_with_delegated_usage_does_not_start_the_call():
    for run in (RunRow(sandbox={"results": {}}), RunRow(children_tokens=10)):
        decision = decided([user(), answer(calls())], run=run)
        assert isinstance(decision, RunTools) and not decision.start_first


def test_a_call_held_back_by_the_loop_hint_is_not_started():
    history = [user()]
    for n in range(3):
        history += [answer(calls(call_id=f"call_{n}")), result(f"call_{n}")]
    decision = decided([*history, answer(calls(call_id="call_3"))], snapshot(streak=2))
    assert isinstance(decision, RunTools) and not decision.start_first


def test_a_final_answer_that_arrives_after_the_deadline_is_still_the_answer():
    run = RunRow(deadline=NOW - timedelta(seconds=1))
    assert decided([user(), answer(text="Sunny.")], run=run) == Finish(StopReason.FINAL_ANSWER)
    # Calls asked for after the deadline do not run: the run ends on its timeout.
    stopped = decided([user(), answer(calls())], run=run)
    assert isinstance(stopped, Finish) and stopped.reason == StopReason.TIMEOUT


def test_a_tree_over_budget_stops_the_calls_the_answer_asks_for():
    run = RunRow(total_tokens=90, children_tokens=20)
    decision = decided([user(), answer(calls())], run=run)
    assert isinstance(decision, Finish) and decision.reason == StopReason.BUDGET


def test_a_provider_error_fails_the_run_and_a_limit_completes_it():
    assert Finish(StopReason.PROVIDER_ERROR, error="down").status == "failed"
    assert Finish(StopReason.MAX_ITERATIONS, "said").status == "completed"
    assert Finish(StopReason.CANCELLED).status == "cancelled"
