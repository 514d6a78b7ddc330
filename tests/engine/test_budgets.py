"""Budgets per run (tokens, cost, deadline) and per agent per day; the sweeper's deadline."""

import zoneinfo
from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.utils import timezone

from agents.models import USAGE_SHARDS, AgentUsageDay
from conversations.models import LLMCall, Message, Run
from engine.sweeper import runs_sweep
from tests.support.llm import agent_on, assert_totals_match_calls, calls_of
from tests.support.runs import advance, ask, start_run

pytestmark = pytest.mark.django_db
USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 40}
# Calls a tool at every step: only a limit ends it.
ENDLESS = {"fallback": {"tool_calls": [{"name": "test-echo", "arguments": {"text": "again"}}], "usage": USAGE}}


def final_message(run: Run) -> str:
    return Message.objects.filter(run=run, role="assistant").order_by("order").last().content


def test_run_token_budget_ends_the_run_and_says_why(fake_llm):
    agent = agent_on(fake_llm, ENDLESS, run_token_budget=250, max_same_tool_streak=50)
    run = ask(agent, "go")

    assert (run.status, run.stop_reason) == ("completed", "budget")
    assert len(calls_of(run)) == 3 and run.total_tokens == 330
    assert "used 330 tokens" in final_message(run) and "limit of 250" in final_message(run)
    assert_totals_match_calls(run)


def test_run_cost_budget(fake_llm):
    # Each call costs (60 × 1.0 + 40 × 0.5 + 10 × 2.0) / 1e6 = 0.0001 at the factory's prices.
    agent = agent_on(fake_llm, ENDLESS, run_cost_budget=Decimal("0.0002"), max_same_tool_streak=50)
    run = ask(agent, "go")

    assert run.stop_reason == "budget" and len(calls_of(run)) == 2
    assert run.cost == Decimal("0.0002") and "in cost" in final_message(run)


def test_daily_usage_adds_up_and_a_spent_daily_budget_stops_the_next_run(fake_llm):
    script = {"fallback": {"content": "fine", "usage": USAGE}}
    agent = agent_on(fake_llm, script, daily_token_budget=200, time_zone="Asia/Shanghai")
    first, second = ask(agent, "one"), ask(agent, "two")
    third = ask(agent, "three")

    today = timezone.now().astimezone(zoneinfo.ZoneInfo("Asia/Shanghai")).date()
    rows = list(AgentUsageDay.objects.filter(agent=agent, day=today))
    assert (sum(row.total_tokens for row in rows), sum(row.calls for row in rows)) == (220, 2)
    assert sum(row.cost for row in rows) == first.cost + second.cost
    # Each run adds to its own shard of the day.
    assert {row.shard for row in rows} == {first.pk.int % USAGE_SHARDS, second.pk.int % USAGE_SHARDS}
    assert (first.stop_reason, second.stop_reason, third.stop_reason) == ("final_answer", "final_answer", "budget")
    assert not LLMCall.objects.filter(run=third).exists()
    assert "daily limit of 200" in final_message(third) and "Asia/Shanghai" in final_message(third)


def test_a_days_usage_is_the_sum_of_its_shards(fake_llm):
    agent = agent_on(fake_llm, {"fallback": {"content": "fine", "usage": USAGE}}, daily_token_budget=200)
    today = timezone.now().astimezone(zoneinfo.ZoneInfo(agent.time_zone)).date()
    # Neither row alone reaches the budget; together they do.
    AgentUsageDay.objects.create(agent=agent, day=today, shard=3, total_tokens=150, calls=1)
    AgentUsageDay.objects.create(agent=agent, day=today, shard=USAGE_SHARDS - 1, total_tokens=60, calls=1)

    run = ask(agent, "one more")

    assert run.stop_reason == "budget"
    assert not LLMCall.objects.filter(run=run).exists()
    assert "used 210 tokens today" in final_message(run)


def test_daily_cost_budget(fake_llm):
    agent = agent_on(fake_llm, {"fallback": {"content": "fine", "usage": USAGE}}, daily_cost_budget=Decimal("0.0001"))
    assert ask(agent, "one").stop_reason == "final_answer"
    assert ask(agent, "two").stop_reason == "budget"


def test_the_deadline_cuts_a_slow_model_call_short(fake_llm):
    with fake_llm.held() as held:  # the model answers only once the run has given up
        # The limit leaves room for the run to reach its model call on a loaded machine.
        agent = agent_on(fake_llm, {"fallback": {"content": "too late", "hold": held.label}}, run_timeout_seconds=3)
        run = ask(agent, "hurry")

    assert (run.status, run.stop_reason) == ("completed", "timeout")
    assert "time limit of 3 seconds" in final_message(run)
    [attempt] = calls_of(run)
    # Failed, not answered: the run stopped waiting while the model's reply was held.
    assert attempt.status == "failed" and "timed out" in attempt.error


def test_the_deadline_is_checked_before_each_step(fake_llm):
    agent = agent_on(fake_llm, {"fallback": {"content": "never"}}, run_timeout_seconds=60)
    run = start_run(agent, "hello")
    Run.objects.filter(pk=run.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    run = advance(run)
    assert run.stop_reason == "timeout" and not LLMCall.objects.filter(run=run).exists()


def test_the_sweeper_ends_queued_and_parked_runs_past_their_deadline(fake_llm):
    agent = agent_on(fake_llm, {"fallback": {"content": "never"}}, run_timeout_seconds=30)
    queued, parked, live, fresh = (start_run(agent, text) for text in ("a", "b", "c", "d"))
    past = timezone.now() - timedelta(seconds=1)
    Run.objects.filter(pk__in=[queued.pk, parked.pk, live.pk]).update(deadline=past)
    Run.objects.filter(pk=parked.pk).update(status="awaiting_approval")
    Run.objects.filter(pk=live.pk).update(
        status="running", lease_owner="w", lease_expires_at=timezone.now() + timedelta(seconds=60)
    )

    with mock.patch("engine.tasks.run_advance_task.delay"):
        summary = runs_sweep()

    assert summary["timed_out"] == 2
    for run in (queued, parked):
        run.refresh_from_db()
        assert (run.status, run.stop_reason) == ("completed", "timeout")
        assert "time limit of 30 seconds" in final_message(run)
    live.refresh_from_db()
    fresh.refresh_from_db()
    assert live.status == "running" and fresh.status == "queued"
