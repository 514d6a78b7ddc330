"""Releases: which version of an agent live traffic runs (seed 001 §4.4, §7.1).

An agent's editable configuration is its draft. Until it is first published, live traffic runs
the draft (agents.services.agent_version_current), as agents always did. Publishing freezes the
draft into a version and makes it the agent's published version; from then on new conversations
run the published version (or, during a canary, the candidate for a share of them) and edits to
the draft reach nobody until published. Every action here is one AgentRelease row.
"""

import hashlib
from typing import Protocol

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Agent, AgentRelease, AgentVersion, ReleaseAction
from agents.services import agent_version_current

PUBLISH_PERMISSION = "agents.publish_agent"
# Running the draft or an unpublished version on purpose (the API's `version`, the try page).
TEST_VERSION_PERMISSION = "agents.test_agent_version"
DRAFT, PUBLISHED = "draft", "published"


class ReleaseRefused(Exception):
    """The release action does not fit the agent's state; the message says why."""


class UnknownVersion(ValueError):
    """A version asked for by name or number that the agent does not have."""


class ReleaseCheck(Protocol):
    """Asked before a version goes live by a publish or a canary's promotion; raises
    ReleaseRefused to stop it. A rollback is not checked: it is how a bad release is undone, and
    must never wait for an evaluation."""

    def __call__(self, *, agent: Agent, version: AgentVersion, action: str) -> None: ...


# Filled at start-up by the apps above this one that hold releases to a bar (evals: its release
# gate), from their AppConfig.ready(): this module imports none of them, and a process that loads
# such an app cannot publish without its check.
_release_checks: list[ReleaseCheck] = []


def release_check_register(check: ReleaseCheck) -> None:
    """Ask `check` before every version goes live. Registering a check again is a no-op
    (ready() may run more than once in a process, as in tests): each check is asked once."""
    if check not in _release_checks:
        _release_checks.append(check)


def release_checks() -> tuple[ReleaseCheck, ...]:
    return tuple(_release_checks)


def _release_checked(*, agent: Agent, version: AgentVersion, action: str) -> None:
    for check in _release_checks:
        check(agent=agent, version=version, action=action)


# Per process: version id -> version. A version's snapshot never changes, so a post that knows
# which version it runs needs no read once the process has seen that version.
_versions_by_id: dict[int, AgentVersion] = {}


def version_by_id(*, version_id: int) -> AgentVersion:
    version = _versions_by_id.get(version_id)
    if version is None:
        version = _versions_by_id[version_id] = AgentVersion.objects.get(pk=version_id)
    return version


def canary_bucket(*, conversation_id, salt: int) -> int:
    """0-99, uniform over conversations and fixed for one: the share of a canary is the buckets
    below its percent. The candidate's id salts it, so successive canaries try other conversations."""
    digest = hashlib.sha256(f"{salt}:{conversation_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100


def release_choice(*, agent: Agent, conversation_id, current_id: int | None) -> int:
    """The id of the version a conversation of a published agent runs.

    A conversation keeps the version it was given while that version is live (published or the
    canary's candidate), so a canary never switches it mid-way; one whose version a release
    retired (rolled back, aborted, superseded) moves to what new conversations get."""
    if current_id is not None and current_id in (agent.published_version_id, agent.canary_version_id):
        return current_id
    if agent.canary_version_id and canary_bucket(conversation_id=conversation_id, salt=agent.canary_version_id) < (
        agent.canary_percent
    ):
        return agent.canary_version_id
    return agent.published_version_id


def version_target(*, agent: Agent, target: str | int) -> AgentVersion:
    """The version named by `target`: "draft", "published", or a version number."""
    if target == DRAFT:
        return agent_version_current(agent=agent)
    if target == PUBLISHED:
        if agent.published_version_id is None:
            raise UnknownVersion(_("The agent has never been published."))
        return version_by_id(version_id=agent.published_version_id)
    version = AgentVersion.objects.filter(agent=agent, number=target, playground=False).first()
    if version is None:
        raise UnknownVersion(_("The agent has no version %(number)s.") % {"number": target})
    return version


def _locked(agent: Agent) -> Agent:
    # Release actions on one agent are serialised: each reads the state it changes.
    return Agent.objects.select_for_update().get(pk=agent.pk)


def _record(
    *, agent: Agent, action: str, version: AgentVersion, previous_id, user, note: str, share=None, **fields
) -> AgentRelease:
    if version.playground:
        # A playground's try-out is nobody's configuration: save it as the draft first.
        raise ReleaseRefused(_("A playground version cannot be released; save it as the agent's draft first."))
    if version.published_at is None and action in (
        ReleaseAction.PUBLISH,
        ReleaseAction.ROLLBACK,
        ReleaseAction.CANARY_START,
    ):
        AgentVersion.objects.filter(pk=version.pk, published_at__isnull=True).update(
            published_at=timezone.now(), published_by=user, note=note
        )
    Agent.objects.filter(pk=agent.pk).update(**fields)
    return AgentRelease.objects.create(
        agent=agent,
        action=action,
        version=version,
        previous_version_id=previous_id,
        canary_percent=share,
        user=user,
        note=note,
    )


def _no_canary(agent: Agent) -> None:
    if agent.canary_version_id:
        raise ReleaseRefused(_("A canary is running: promote it or roll it back first."))


@transaction.atomic
def version_publish(*, agent: Agent, user, note: str) -> AgentRelease:
    """Freeze the draft into a version and make it what new conversations run."""
    if not note.strip():
        raise ReleaseRefused(_("Say what changed: a note is required to publish."))
    agent = _locked(agent)
    _no_canary(agent)
    version = agent_version_current(agent=agent)
    if version.pk == agent.published_version_id:
        raise ReleaseRefused(_("The draft is the published version already: nothing to publish."))
    _release_checked(agent=agent, version=version, action=ReleaseAction.PUBLISH)
    return _record(
        agent=agent,
        action=ReleaseAction.PUBLISH,
        version=version,
        previous_id=agent.published_version_id,
        user=user,
        note=note.strip(),
        published_version=version,
    )


@transaction.atomic
def version_rollback(*, agent: Agent, version: AgentVersion, user, note: str = "") -> AgentRelease:
    """Publish an earlier version again."""
    agent = _locked(agent)
    _no_canary(agent)
    if version.agent_id != agent.pk:
        raise UnknownVersion(_("That version is another agent's."))
    if version.pk == agent.published_version_id:
        raise ReleaseRefused(_("Version %(number)s is the published version already.") % {"number": version.number})
    return _record(
        agent=agent,
        action=ReleaseAction.ROLLBACK,
        version=version,
        previous_id=agent.published_version_id,
        user=user,
        note=note.strip(),
        published_version=version,
    )


@transaction.atomic
def canary_start(*, agent: Agent, percent: int, user, note: str) -> AgentRelease:
    """Send `percent` of new conversations to the draft, frozen as the candidate version."""
    if not note.strip():
        raise ReleaseRefused(_("Say what changed: a note is required to start a canary."))
    if not 1 <= percent <= 99:
        raise ReleaseRefused(_("The canary's share is a percent from 1 to 99."))
    agent = _locked(agent)
    _no_canary(agent)
    if agent.published_version_id is None:
        raise ReleaseRefused(_("Publish a first version before a canary: there is nothing to compare it with."))
    version = agent_version_current(agent=agent)
    if version.pk == agent.published_version_id:
        raise ReleaseRefused(_("The draft is the published version: change it before starting a canary."))
    return _record(
        agent=agent,
        action=ReleaseAction.CANARY_START,
        version=version,
        previous_id=agent.published_version_id,
        user=user,
        note=note.strip(),
        share=percent,
        canary_version=version,
        canary_percent=percent,
    )


def _canary_end(*, agent: Agent, promote: bool, user, note: str) -> AgentRelease:
    agent = _locked(agent)
    if not agent.canary_version_id:
        raise ReleaseRefused(_("No canary is running."))
    candidate = version_by_id(version_id=agent.canary_version_id)
    fields = {"canary_version": None, "canary_percent": 0}
    if promote:
        _release_checked(agent=agent, version=candidate, action=ReleaseAction.CANARY_PROMOTE)
        fields["published_version"] = candidate
    return _record(
        agent=agent,
        action=ReleaseAction.CANARY_PROMOTE if promote else ReleaseAction.CANARY_ABORT,
        version=candidate,
        previous_id=agent.published_version_id,
        user=user,
        note=note.strip(),
        share=agent.canary_percent,
        **fields,
    )


@transaction.atomic
def canary_promote(*, agent: Agent, user, note: str = "") -> AgentRelease:
    """The candidate becomes the published version for every new conversation."""
    return _canary_end(agent=agent, promote=True, user=user, note=note)


@transaction.atomic
def canary_abort(*, agent: Agent, user, note: str = "") -> AgentRelease:
    """End the canary, keeping the published version; its conversations move back at their next message."""
    return _canary_end(agent=agent, promote=False, user=user, note=note)


def release_apply(
    *, agent: Agent, user, action: str, note: str = "", percent: int | None = None, version: int | None = None
) -> AgentRelease:
    """One release action by name, as the release forms post it (the admin's versions page, the
    agent's page): publish, rollback (to version number `version`), canary_start (`percent`),
    canary_promote, canary_abort."""
    note = note or ""
    match action:
        case "publish":
            return version_publish(agent=agent, user=user, note=note)
        case "rollback":
            target = AgentVersion.objects.filter(agent=agent, number=version or 0, playground=False).first()
            if target is None:
                raise UnknownVersion(_("The agent has no such version."))
            return version_rollback(agent=agent, version=target, user=user, note=note)
        case "canary_start":
            return canary_start(agent=agent, percent=percent or 0, user=user, note=note)
        case "canary_promote":
            return canary_promote(agent=agent, user=user, note=note)
        case "canary_abort":
            return canary_abort(agent=agent, user=user, note=note)
    raise ValueError(f"unknown release action {action!r}")
