"""An agent's limits per end user (Agent.end_user_tokens_per_day, end_user_messages_per_minute):
rules of admission, checked by engine.admission for a message of every way in (the API, /v1, the
widget, hooks, schedules, the CLI, the try page), so no interface has to remember them.

The workspace's budgets and quotas (workspace_limits_check) are checked for the same messages.

An end user is one of an application's (the conversation's owner): the same id under another
owner is another person. Runs the engine starts itself (delegated children, forks, evaluation
cases and replays) are not end users' messages and are not checked; their tokens still count
towards the day of the conversation's end user."""

import hashlib
import hmac
import math
from datetime import datetime

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Agent
from conversations.end_users import day_bounds, end_user_tokens_since
from conversations.models import Conversation, RunTrigger
from conversations.workspace_usage import Period, workspace_has_limits, workspaces_usage
from platform_site.refusals import LimitReached
from platform_site.sliding_windows import window_admit
from workspaces.models import Workspace

# What the check reads of an agent not loaded already.
END_USER_LIMIT_FIELDS = ("id", "end_user_messages_per_minute", "end_user_tokens_per_day", "time_zone")
MINUTE = 60
# Runs the engine starts itself: no end user's message, so no limit per end user nor per workspace.
INTERNAL_TRIGGERS = frozenset({RunTrigger.FORK, RunTrigger.EVAL, RunTrigger.DELEGATION})
# A workspace at its limit of runs in flight: try again after this many seconds (a run ends in
# seconds; its end is not known in advance, unlike a day's).
IN_FLIGHT_RETRY_AFTER = 5


class AdmissionRefused(LimitReached):
    """A message refused by one of the agent's limits per end user; `retry_after` in seconds.
    The API answers it with 429 and Retry-After, a schedule records a refused fire, the CLI
    prints it and exits non-zero."""


def end_user_window_key(*, agent_id: int, owner_id: int | None, end_user: str) -> str:
    """The cache key of the end user's minute window: a keyed digest, never their id. The window
    outlives a forgotten end user by up to a minute and must not name them."""
    subject = f"{agent_id}:{owner_id}:{end_user}".encode()
    digest = hmac.new(settings.SECRET_KEY.encode(), subject, hashlib.sha256).hexdigest()[:32]
    return f"throttle_end_user_messages_{digest}"


def conversation_limits_check(*, conversation: Conversation, trigger: str, now: datetime | None = None) -> None:
    """end_user_limits_check for a message in `conversation` (its owner's end user) that came in
    by `trigger`. Reads nothing for a conversation without an end user or an internal run; the
    agent, when not loaded with the conversation, in one read."""
    if not conversation.end_user or trigger in INTERNAL_TRIGGERS:
        return
    if Conversation.agent.is_cached(conversation):
        agent = conversation.agent
    else:
        agent = Agent.objects.only(*END_USER_LIMIT_FIELDS).get(pk=conversation.agent_id)
    end_user_limits_check(
        agent=agent, owner_id=conversation.owner_id, end_user=conversation.end_user, trigger=trigger, now=now
    )


def end_user_limits_check(
    *, agent: Agent, owner_id: int | None, end_user: str, trigger: str, now: datetime | None = None
) -> None:
    """Raises AdmissionRefused when a message of `end_user` (of the application `owner_id`) to
    `agent`, come in by `trigger`, is over one of the agent's limits per end user. Tokens today
    first, read from the ledger (end_user_tokens_since: exact, and a message it refuses is not
    counted in the minute's window), then messages this minute, in a sliding window in Redis like
    the API's rates. No limit set, no end user or an internal run: nothing is read."""
    if not end_user or trigger in INTERNAL_TRIGGERS:
        return
    now = now or timezone.now()
    daily = agent.end_user_tokens_per_day
    if daily is not None:
        start, end = day_bounds(now, agent.time_zone)
        used = end_user_tokens_since(agent_id=agent.pk, owner_id=owner_id, end_user=end_user, since=start)
        if used >= daily:
            raise AdmissionRefused(
                _(
                    "This end user has used %(used)s tokens of this agent today, which reaches its limit of "
                    "%(limit)s per end user a day; the limit resets at midnight (%(time_zone)s)."
                )
                % {"used": used, "limit": daily, "time_zone": agent.time_zone},
                retry_after=max(1, math.ceil((end - now).total_seconds())),
            )
    per_minute = agent.end_user_messages_per_minute
    if per_minute is not None:
        wait = window_admit(
            key=end_user_window_key(agent_id=agent.pk, owner_id=owner_id, end_user=end_user),
            duration=MINUTE,
            limit=per_minute,
            now=now.timestamp(),
            counter="API rate limit (end_user_messages)",
        )
        if wait is not None:
            raise AdmissionRefused(
                _("This end user has sent this agent %(limit)s messages in the last minute, its limit per end user.")
                % {"limit": per_minute},
                retry_after=math.ceil(wait),
            )


def _seconds_to(end: datetime, now: datetime) -> int:
    return max(1, math.ceil((end - now).total_seconds()))


def workspace_limits_check(
    *, workspace: Workspace | None, workspace_id: int, trigger: str, now: datetime | None = None
) -> None:
    """Raises AdmissionRefused when the workspace `workspace_id` has used its tokens or cost of
    the day or the month, or has its maximum of runs in flight (conversations.workspace_usage).
    `workspace` is its row when the caller has it (joined with the agent or the API token): a
    workspace without limits then costs no statement, one with limits one. Without it, its
    limits are read with the usage, in that one statement. Internal runs are not checked.

    The runs in flight are counted when a message is admitted, not reserved: posts admitted at
    the same moment may each see room for one more, so the limit is a soft one (as the limits per
    end user are), overrun by at most the posts admitted concurrently."""
    if trigger in INTERNAL_TRIGGERS:
        return
    if workspace is not None and not workspace_has_limits(workspace):
        return
    now = now or timezone.now()
    period = Period.at(now)
    usage = workspaces_usage(period=period, workspace_id=workspace_id).get(workspace_id)
    if usage is None:
        return
    limits = usage.limits
    zone = {"time_zone": period.time_zone}
    checks = (
        (
            usage.tokens_today,
            limits["daily_token_limit"],
            period.day_end,
            _(
                "This workspace has used %(used)s tokens today, which reaches its daily limit of %(limit)s; "
                "the limit resets at midnight (%(time_zone)s)."
            ),
        ),
        (
            usage.cost_today,
            limits["daily_cost_limit"],
            period.day_end,
            _(
                "This workspace has used %(used)s in cost today, which reaches its daily limit of %(limit)s; "
                "the limit resets at midnight (%(time_zone)s)."
            ),
        ),
        (
            usage.tokens_month,
            limits["monthly_token_limit"],
            period.month_end,
            _(
                "This workspace has used %(used)s tokens this month, which reaches its monthly limit of %(limit)s; "
                "the limit resets on the first of next month (%(time_zone)s)."
            ),
        ),
        (
            usage.cost_month,
            limits["monthly_cost_limit"],
            period.month_end,
            _(
                "This workspace has used %(used)s in cost this month, which reaches its monthly limit of %(limit)s; "
                "the limit resets on the first of next month (%(time_zone)s)."
            ),
        ),
    )
    for used, limit, end, message in checks:
        if limit is not None and used >= limit:
            raise AdmissionRefused(message % {"used": used, "limit": limit, **zone}, retry_after=_seconds_to(end, now))
    in_flight = limits["max_runs_in_flight"]
    if in_flight is not None and usage.runs_in_flight >= in_flight:
        raise AdmissionRefused(
            _("This workspace has %(used)s runs in flight, its limit; try again when one has ended.")
            % {"used": usage.runs_in_flight},
            retry_after=IN_FLIGHT_RETRY_AFTER,
        )
