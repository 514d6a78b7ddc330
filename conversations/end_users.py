"""End users: the application's own id for the person a conversation serves
(Conversation.end_user), the rules such an id follows, and the reads made per end user (their
conversations and runs, what they used of an agent today).

An end user is (owner, end_user), an EndUser: the id is the application's, so another token
owner's end user of the same id is another person, and every read here is narrowed to one owner.
The owner is None for the platform's own end users: those of conversations no application owns
(started by `manage.py agentry_chat --end-user`, the demo, or a schedule or hook without an
owner). end_user_q is the one definition of which rows are a person's, for every reader (the
API, the admin's forget action and its confirmation, the command line, memory.forget).
"""

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.db.models import F, Q, QuerySet, Sum
from django.utils.translation import gettext as _

from conversations.models import Conversation, Run
from conversations.selectors import runs_visible_to

END_USER_MAX_CHARS = Conversation._meta.get_field("end_user").max_length


class EndUserInvalid(ValueError):
    """Not an end user id; the message says why."""


@dataclass(frozen=True)
class EndUser:
    """One person: the application whose id it is (its token's owner; None: the platform's own)
    and that id."""

    owner_id: int | None
    end_user: str


def end_user_q(person: EndUser, *, via: str = "") -> Q:
    """The rows that are this person's, for any model naming them by `owner` and `end_user`
    (conversations, memories, memory changes), `via` the path to those fields ("conversation__"
    from a run). No owner is IS NULL, spelled out: a filter such as `owner_id__in=[None]` matches
    no row at all (NULL equals nothing in SQL) and would miss every end user of the platform's own."""
    owner = {f"{via}owner__isnull": True} if person.owner_id is None else {f"{via}owner_id": person.owner_id}
    return Q(**owner, **{f"{via}end_user": person.end_user})


def end_users_of(conversations: QuerySet[Conversation]) -> list[EndUser]:
    """The people these conversations are with (those with an end user), by owner then id."""
    pairs = conversations.exclude(end_user="").values_list("owner_id", "end_user").distinct().order_by()
    return sorted(
        {EndUser(owner_id, end_user) for owner_id, end_user in pairs}, key=lambda p: (p.owner_id or 0, p.end_user)
    )


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
        end_user_q(EndUser(owner_id, end_user), via="conversation__"),
        conversation__agent_id=agent_id,
        created_at__gte=since,
    ).aggregate(tokens=Sum(F("total_tokens") + F("children_tokens")))["tokens"]
    return used or 0


def _by_agent(rows: QuerySet, agent_field: str, agent_slug: str | None) -> QuerySet:
    return rows.filter(**{f"{agent_field}__slug": agent_slug}) if agent_slug else rows


def end_user_conversations(*, person: EndUser, agent_slug: str | None = None) -> QuerySet[Conversation]:
    """The person's conversations, newest first; only one agent's if a slug is given."""
    conversations = Conversation.objects.select_related("agent").filter(end_user_q(person))
    return _by_agent(conversations, "agent", agent_slug).order_by("-created_at")


def end_user_runs(*, person: EndUser, reader, agent_slug: str | None = None) -> QuerySet[Run]:
    """The runs of the person's conversations, newest first, read as the API reads any run for
    `reader` (runs_visible_to: what was asked and the final answer)."""
    runs = runs_visible_to(user=reader).filter(end_user_q(person, via="conversation__"))
    return _by_agent(runs, "conversation__agent", agent_slug).order_by("-created_at")
