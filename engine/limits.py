"""Budgets and the deadline: when a run must stop, and the message that tells the user why.

The checks are pure: run budgets read the totals on the run row the step already loaded, the
daily budgets the agent's usage today, which `daily_usage` reads (the day's rows of AgentUsageDay,
one per shard, in one indexed read, and only for agents that have a daily budget).
"""

import zoneinfo
from dataclasses import dataclass
from decimal import Decimal

from django.utils.translation import gettext_lazy as _

from agents.selectors import agent_usage_on
from agents.snapshot import AgentSnapshot
from conversations.models import Run, StopReason
from engine.speech import agent_says

TIMEOUT_MESSAGE = _(
    "I stopped here: this request reached its time limit of {seconds} seconds before I had a final answer. "
    "Please try again, or ask a narrower question."
)
RUN_BUDGET_MESSAGE = _(
    "I stopped here: answering this has used {used} {what}, which reaches this agent's limit of {limit} per "
    "request, and I have no final answer yet. Please narrow the question or ask me to continue."
)
DAILY_BUDGET_MESSAGE = _(
    "I can't continue right now: this agent has used {used} {what} today, which reaches its daily limit of "
    "{limit}. The limit resets at midnight ({time_zone})."
)
TOKENS = _("tokens")
IN_COST = _("in cost")


@dataclass
class Limit:
    stop_reason: str
    message: str


def timeout_limit(snapshot: AgentSnapshot) -> Limit:
    seconds = snapshot["agent"].get("run_timeout_seconds")
    return Limit(StopReason.TIMEOUT, agent_says(snapshot, TIMEOUT_MESSAGE, seconds=seconds))


def deadline_passed(run: Run, snapshot: AgentSnapshot, *, now) -> Limit | None:
    if run.deadline is not None and now >= run.deadline:
        return timeout_limit(snapshot)
    return None


def _reached(used, limit) -> bool:
    return limit is not None and used >= limit


def daily_usage(run: Run, snapshot: AgentSnapshot, *, now) -> tuple[int, Decimal] | None:
    """(tokens, cost) the run's agent used today in its time zone; None if it has no daily budget."""
    agent = snapshot["agent"]
    if agent.get("daily_token_budget") is None and agent.get("daily_cost_budget") is None:
        return None
    return agent_usage_on(agent_id=run.agent_id, day=now.astimezone(zoneinfo.ZoneInfo(agent["time_zone"])).date())


def budget_limit(run: Run, snapshot: AgentSnapshot, *, usage_today: tuple[int, Decimal] | None) -> Limit | None:
    """The run's or the day's budget, whichever is used up first; `usage_today` is daily_usage's."""
    agent = snapshot["agent"]
    token_limit, cost_limit = agent.get("run_token_budget"), agent.get("run_cost_budget")
    # A run's budget counts the runs it delegated to (agents as tools), as each of them ended.
    tokens, cost = run.total_tokens + run.children_tokens, run.cost + run.children_cost
    if _reached(tokens, token_limit):
        return Limit(
            StopReason.BUDGET,
            agent_says(snapshot, RUN_BUDGET_MESSAGE, used=tokens, what=TOKENS, limit=token_limit),
        )
    if cost_limit is not None and _reached(cost, Decimal(cost_limit)):
        return Limit(
            StopReason.BUDGET,
            agent_says(snapshot, RUN_BUDGET_MESSAGE, used=f"{cost:.4f}", what=IN_COST, limit=cost_limit),
        )
    if usage_today is None:
        return None
    daily_tokens, daily_cost = agent.get("daily_token_budget"), agent.get("daily_cost_budget")
    zone = agent["time_zone"]
    tokens, cost = usage_today
    if _reached(tokens, daily_tokens):
        return Limit(
            StopReason.BUDGET,
            agent_says(snapshot, DAILY_BUDGET_MESSAGE, used=tokens, what=TOKENS, limit=daily_tokens, time_zone=zone),
        )
    if daily_cost is not None and _reached(cost, Decimal(daily_cost)):
        return Limit(
            StopReason.BUDGET,
            agent_says(
                snapshot, DAILY_BUDGET_MESSAGE, used=f"{cost:.4f}", what=IN_COST, limit=daily_cost, time_zone=zone
            ),
        )
    return None
