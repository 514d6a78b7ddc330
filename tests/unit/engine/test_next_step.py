"""The next step of a run as a pure function: plain objects in, a decision out.

No test here is marked django_db, so any query next_step made would fail the test."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from conversations.models import Message, RunStatus, StopReason
from engine.next_step import CallModel, Finish, RunTools, next_step

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CALLS = [{"id": "call_1", "type": "function", "function": {"name": "get-weather", "arguments": "{}"}}]


@dataclass
class RunRow:
    """The run fields the decision reads, as a step has them after loading the row."""

    cancel_requested: bool = False
    deadline: datetime | None = None
    iterations: int = 0
    total_tokens: int = 0
    cost: Decimal = Decimal(0)
    agent_id: int = 1
    children_tokens: int = 0
    children_cost: Decimal = Decimal(0)
    output_schema: dict | None = None


def snapshot(**agent) -> dict:
    settings = {
        "max_iterations": 5,
        "run_timeout_seconds": 60,
        "time_zone": "Asia/Shanghai",
        "run_token_budget": None,
        "run_cost_budget": None,
        "daily_token_budget": None,
        "daily_cost_budget": None,
    }
    return {"agent": {**settings, **agent}, "model": {}, "fallback_model": None, "tools": []}


def user(text="What is the weather in Beijing?"):
    return Message(role=Message.Role.USER, content=text)


def assistant(text="", tool_calls=None):
    return Message(role=Message.Role.ASSISTANT, content=text, tool_calls=tool_calls)


def tool_result():
    return Message(role=Message.Role.TOOL, content="sunny", tool_call_id="call_1")


def step(run=None, messages=None, snap=None, **kwargs):
    return next_step(run or RunRow(), messages or [user()], snap or snapshot(), now=NOW, **kwargs)


def test_a_user_message_or_tool_results_call_the_model():
    assert step(messages=[user()]) == CallModel()
    assert step(messages=[user(), assistant(tool_calls=CALLS), tool_result()]) == CallModel()


def test_tool_calls_of_the_last_answer_run_next():
    asked = assistant(tool_calls=CALLS)
    decision = step(messages=[user(), asked])
    assert isinstance(decision, RunTools) and decision.message is asked


def test_an_answer_without_tool_calls_completes_the_run():
    decision = step(messages=[user(), assistant("Sunny, 25 °C.")])
    assert decision == Finish(StopReason.FINAL_ANSWER)
    assert decision.status == RunStatus.COMPLETED and decision.message is None


def test_a_cancel_ends_the_run_before_anything_else():
    run = RunRow(cancel_requested=True, deadline=NOW - timedelta(seconds=1), iterations=9)
    for messages in ([user()], [user(), assistant(tool_calls=CALLS)], [user(), assistant("done")]):
        decision = step(run, messages)
        assert decision == Finish(StopReason.CANCELLED)
        assert decision.status == RunStatus.CANCELLED


@pytest.mark.parametrize("late", [timedelta(0), timedelta(seconds=1)])
def test_at_or_past_the_deadline_the_run_times_out_even_with_calls_pending(late):
    run = RunRow(deadline=NOW - late)
    decision = step(run, [user(), assistant(tool_calls=CALLS)], snapshot(run_timeout_seconds=30))
    assert decision.reason == StopReason.TIMEOUT and decision.status == RunStatus.COMPLETED
    assert "time limit of 30 seconds" in decision.message


def test_before_the_deadline_the_run_goes_on():
    assert step(RunRow(deadline=NOW + timedelta(seconds=1))) == CallModel()


def test_max_iterations_stops_model_calls_but_not_the_calls_already_asked_for():
    run = RunRow(iterations=5)
    decision = step(run, [user(), assistant(tool_calls=CALLS), tool_result()])
    assert decision.reason == StopReason.MAX_ITERATIONS and "more than 5 model steps" in decision.message
    assert isinstance(step(run, [user(), assistant(tool_calls=CALLS)]), RunTools)
    assert step(RunRow(iterations=4)) == CallModel()


def test_run_budgets():
    decision = step(RunRow(total_tokens=250), snap=snapshot(run_token_budget=250))
    assert decision.reason == StopReason.BUDGET and "used 250 tokens" in decision.message
    decision = step(RunRow(cost=Decimal("0.0003")), snap=snapshot(run_cost_budget="0.0002"))
    assert decision.reason == StopReason.BUDGET and "0.0003 in cost" in decision.message
    assert (
        step(
            RunRow(total_tokens=249, cost=Decimal("0.0001")),
            snap=snapshot(run_token_budget=250, run_cost_budget="0.0002"),
        )
        == CallModel()
    )


def test_a_run_budget_counts_the_runs_it_delegated_to_even_with_calls_pending():
    over = RunRow(total_tokens=100, children_tokens=150)
    decision = step(over, [user(), assistant(tool_calls=CALLS)], snap=snapshot(run_token_budget=250))
    assert decision.reason == StopReason.BUDGET and "used 250 tokens" in decision.message
    decision = step(RunRow(children_cost=Decimal("0.0003")), snap=snapshot(run_cost_budget="0.0002"))
    assert decision.reason == StopReason.BUDGET
    # Its own usage alone does not stop pending calls: they were asked for.
    alone = RunRow(total_tokens=300)
    assert isinstance(step(alone, [user(), assistant(tool_calls=CALLS)], snap=snapshot(run_token_budget=250)), RunTools)
    under = RunRow(total_tokens=100, children_tokens=149)
    assert isinstance(step(under, [user(), assistant(tool_calls=CALLS)], snap=snapshot(run_token_budget=250)), RunTools)


def test_daily_budgets_read_the_usage_the_caller_passes():
    daily = snapshot(daily_token_budget=1000)
    decision = step(snap=daily, usage_today=(1000, Decimal(0)))
    assert decision.reason == StopReason.BUDGET and "today" in decision.message and "Asia/Shanghai" in decision.message
    assert step(snap=daily, usage_today=(999, Decimal(0))) == CallModel()
    decision = step(snap=snapshot(daily_cost_budget="1.5"), usage_today=(0, Decimal("1.5")))
    assert decision.reason == StopReason.BUDGET


def test_the_iteration_limit_is_said_before_the_budget():
    run = RunRow(iterations=5, total_tokens=500)
    assert step(run, snap=snapshot(run_token_budget=100)).reason == StopReason.MAX_ITERATIONS


def test_the_same_inputs_give_the_same_step_and_stay_as_they_were():
    run, messages, snap = RunRow(iterations=2), [user(), assistant(tool_calls=CALLS)], snapshot()
    first, second = step(run, messages, snap), step(run, messages, snap)
    assert first == second
    assert run == RunRow(iterations=2) and len(messages) == 2 and snap == snapshot()
