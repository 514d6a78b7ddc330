"""An agent's limits per end user (Agent.end_user_tokens_per_day, end_user_messages_per_minute):
rules of admission, checked by engine.admission for a message of every way in (the API, /v1, the
widget, hooks, schedules, the CLI, the try page), so no interface has to remember them.

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
from platform_site.refusals import LimitReached
from platform_site.sliding_windows import window_admit

# What the check reads of an agent not loaded already.
END_USER_LIMIT_FIELDS = ("id", "end_user_messages_per_minute", "end_user_tokens_per_day", "time_zone")
MINUTE = 60
# Runs the engine starts itself: no end user's message, so no limit per end user.
INTERNAL_TRIGGERS = frozenset({RunTrigger.FORK, RunTrigger.EVAL, RunTrigger.DELEGATION})


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
