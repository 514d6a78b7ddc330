"""End users: the application's own id for the person a conversation serves
(Conversation.end_user), the rules such an id follows, and the reads made per end user (their
conversations and runs, what they used of an agent today).

An end user is (owner, end_user): the id is the application's, so another token owner's end user
of the same id is another person, and every read here is narrowed to one owner.
"""

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.db.models import F, QuerySet, Sum
from django.utils.translation import gettext as _

from conversations.models import Conversation, Run
from conversations.selectors import runs_visible_to

END_USER_MAX_CHARS = Conversation._meta.get_field("end_user").max_length


class EndUserInvalid(ValueError):
    """Not an end user id; the message says why."""


def end_user_clean(value: str) -> str:
    """The id as it is stored: surrounding whitespace stripped, empty meaning none. Only printable
    characters: the id shows in the admin, in logs and in URLs, where a control character (a
    newline forging a log line, a NUL PostgreSQL refuses, a lone surrogate) has no place."""
    end_user = value.strip()
    if len(end_user) > END_USER_MAX_CHARS:
        raise EndUserInvalid(_("Must be at most %(count)s characters.") % {"count": END_USER_MAX_CHARS})
    if not end_user.isprintable():
        raise EndUserInvalid(_("Must hold only printable characters, no control characters."))
    return end_user


def day_bounds(now: datetime, time_zone: str) -> tuple[datetime, datetime]:
    """The start and the end (the next midnight) of `now`'s day in `time_zone`, in UTC. Worked out
    from the local dates rather than as start + 24 hours: where the clocks change, a day lasts 23
    or 25 hours."""
    zone = ZoneInfo(time_zone)
    day = now.astimezone(zone).date()
    start = datetime.combine(day, time(), tzinfo=zone)
    end = datetime.combine(day + timedelta(days=1), time(), tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)


def end_user_tokens_since(*, agent_id: int, owner_id: int | None, end_user: str, since: datetime) -> int:
    """Tokens used by the end user's runs of the agent that started since `since`, the runs they
    delegated to included. Read from the runs' totals, which each model call adds to in the commit
    that records it: exact, a run still going counts what it has used so far, and nothing has to
    be counted twice. One indexed read: the end user's conversations of the agent
    (conversation_end_user_idx), then their runs since then (run_conversation_idx)."""
    used = Run.objects.filter(
        conversation__end_user=end_user,
        conversation__agent_id=agent_id,
        conversation__owner_id=owner_id,
        created_at__gte=since,
    ).aggregate(tokens=Sum(F("total_tokens") + F("children_tokens")))["tokens"]
    return used or 0


def _by_agent(rows: QuerySet, agent_field: str, agent_slug: str | None) -> QuerySet:
    return rows.filter(**{f"{agent_field}__slug": agent_slug}) if agent_slug else rows


def end_user_conversations(*, owner, end_user: str, agent_slug: str | None = None) -> QuerySet[Conversation]:
    """The owner's conversations with this end user, newest first; only one agent's if a slug is given."""
    conversations = Conversation.objects.select_related("agent").filter(owner=owner, end_user=end_user)
    return _by_agent(conversations, "agent", agent_slug).order_by("-created_at")


def end_user_runs(*, owner, end_user: str, agent_slug: str | None = None) -> QuerySet[Run]:
    """The runs of the owner's conversations with this end user, newest first, read as the API
    reads any run (runs_visible_to: what was asked and the final answer)."""
    runs = runs_visible_to(user=owner).filter(conversation__owner=owner, conversation__end_user=end_user)
    return _by_agent(runs, "conversation__agent", agent_slug).order_by("-created_at")
