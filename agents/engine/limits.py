"""Budgets and the deadline: when a run must stop, and the message that tells the user why.

Run budgets read the totals on the run row the step already loaded; the daily budgets read
one row of AgentUsageDay, and only for agents that have one.
"""

import zoneinfo
from dataclasses import dataclass
from decimal import Decimal

from django.utils import timezone

from agents.selectors import agent_usage_on
from conversations.models import Run, StopReason

TIMEOUT_MESSAGE = (
    "I stopped here: this request reached its time limit of {seconds} seconds before I had a final answer. "
    "Please try again, or ask a narrower question."
)
RUN_BUDGET_MESSAGE = (
    "I stopped here: answering this has used {used} {what}, which reaches this agent's limit of {limit} per "
    "request, and I have no final answer yet. Please narrow the question or ask me to continue."
)
DAILY_BUDGET_MESSAGE = (
    "I can't continue right now: this agent has used {used} {what} today, which reaches its daily limit of "
    "{limit}. The limit resets at midnight ({time_zone})."
)


@dataclass
class Limit:
    stop_reason: str
    message: str


def timeout_limit(snapshot: dict) -> Limit:
    return Limit(StopReason.TIMEOUT, TIMEOUT_MESSAGE.format(seconds=snapshot["agent"].get("run_timeout_seconds")))


def deadline_passed(run: Run, snapshot: dict) -> Limit | None:
    if run.deadline is not None and timezone.now() >= run.deadline:
        return timeout_limit(snapshot)
    return None


def _reached(used, limit) -> bool:
    return limit is not None and used >= limit


def budget_reached(run: Run, snapshot: dict) -> Limit | None:
    agent = snapshot["agent"]
    token_limit, cost_limit = agent.get("run_token_budget"), agent.get("run_cost_budget")
    if _reached(run.total_tokens, token_limit):
        return Limit(StopReason.BUDGET, RUN_BUDGET_MESSAGE.format(used=run.total_tokens, what="tokens", limit=token_limit))
    if cost_limit is not None and _reached(run.cost, Decimal(cost_limit)):
        return Limit(StopReason.BUDGET, RUN_BUDGET_MESSAGE.format(used=f"{run.cost:.4f}", what="in cost",
                                                                  limit=cost_limit))
    daily_tokens, daily_cost = agent.get("daily_token_budget"), agent.get("daily_cost_budget")
    if daily_tokens is None and daily_cost is None:
        return None
    zone = agent["time_zone"]
    tokens, cost = agent_usage_on(agent_id=run.agent_id, day=timezone.now().astimezone(zoneinfo.ZoneInfo(zone)).date())
    if _reached(tokens, daily_tokens):
        return Limit(StopReason.BUDGET, DAILY_BUDGET_MESSAGE.format(used=tokens, what="tokens", limit=daily_tokens,
                                                                    time_zone=zone))
    if daily_cost is not None and _reached(cost, Decimal(daily_cost)):
        return Limit(StopReason.BUDGET, DAILY_BUDGET_MESSAGE.format(used=f"{cost:.4f}", what="in cost",
                                                                    limit=daily_cost, time_zone=zone))
    return None
