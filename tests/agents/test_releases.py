"""Releases: once an agent is published, new conversations run its published version (or a
canary's candidate for their share), edits to the draft reach nobody until published, and every
release action is an audit row. Posts go through the API, as live traffic does."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Agent, AgentRelease, AgentVersion, ReleaseAction
from agents.releases import (
    ReleaseRefused,
    UnknownVersion,
    canary_abort,
    canary_bucket,
    canary_promote,
    canary_start,
    version_publish,
    version_rollback,
)
from conversations.models import Conversation, Run
from conversations.services import conversation_create
from tests.security.privileges import user_with
from tests.support.api import client_for
from tests.support.factories import make_agent
from tests.support.runs import start_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def prompted_agent():
    return make_agent(tools=["test-echo"], system_prompt="Prompt one.")


@pytest.fixture
def operator():
    return user_with("agents.publish_agent")


@pytest.fixture
def caller():
    return user_with(staff=False)


def _edit(agent: Agent, prompt: str) -> None:
    Agent.objects.filter(pk=agent.pk).update(system_prompt=prompt)
    agent.refresh_from_db()


def _conversation(api, agent) -> str:
    response = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _post(api, conversation_id: str, **extra):
    return api.post(f"/api/v1/conversations/{conversation_id}/messages/", {"content": "hi", **extra}, format="json")


def _run_version(api, conversation_id: str, **extra) -> AgentVersion:
    response = _post(api, conversation_id, **extra)
    assert response.status_code == 202, response.content
    run = Run.objects.select_related("agent_version").get(pk=response.json()["id"])
    Run.objects.filter(pk=run.pk).update(status="completed")  # free the conversation for its next message
    return run.agent_version


def _prompt(version: AgentVersion) -> str:
    return version.snapshot["agent"]["system_prompt"]


def test_an_agent_never_published_serves_its_draft(prompted_agent, caller):
    api = client_for(caller)
    assert _prompt(_run_version(api, _conversation(api, prompted_agent))) == "Prompt one."
    _edit(prompted_agent, "Prompt two.")
    assert _prompt(_run_version(api, _conversation(api, prompted_agent))) == "Prompt two."
    assert not AgentRelease.objects.exists()


def test_publishing_pins_new_conversations_and_draft_edits_do_not_leak(prompted_agent, caller, operator):
    api = client_for(caller)
    release = version_publish(agent=prompted_agent, user=operator, note="First release.")
    published = release.version
    _edit(prompted_agent, "Draft, not yet published.")

    conversation = _conversation(api, prompted_agent)
    assert _run_version(api, conversation) == published
    assert _run_version(api, _conversation(api, prompted_agent)) == published
    assert Conversation.objects.get(pk=conversation).agent_version == published

    second = version_publish(agent=prompted_agent, user=operator, note="Second release.").version
    assert _prompt(second) == "Draft, not yet published." and second.number > published.number
    # The old version is retired: a new conversation and the old one's next message run the new one.
    assert _run_version(api, _conversation(api, prompted_agent)) == second
    assert _run_version(api, conversation) == second

    published.refresh_from_db()
    assert published.published_by == operator and published.note == "First release." and published.published_at


def test_publishing_an_unchanged_draft_or_without_a_note_is_refused(prompted_agent, operator):
    with pytest.raises(ReleaseRefused):
        version_publish(agent=prompted_agent, user=operator, note="  ")
    version_publish(agent=prompted_agent, user=operator, note="First.")
    with pytest.raises(ReleaseRefused):
        version_publish(agent=prompted_agent, user=operator, note="Again.")
    assert AgentRelease.objects.count() == 1


def test_rollback_restores_an_earlier_version_for_new_conversations(prompted_agent, caller, operator):
    api = client_for(caller)
    first = version_publish(agent=prompted_agent, user=operator, note="One.").version
    _edit(prompted_agent, "Prompt two.")
    second = version_publish(agent=prompted_agent, user=operator, note="Two.").version
    assert _run_version(api, _conversation(api, prompted_agent)) == second

    version_rollback(agent=prompted_agent, version=first, user=operator, note="Two misbehaves.")
    assert _run_version(api, _conversation(api, prompted_agent)) == first
    prompted_agent.refresh_from_db()
    assert prompted_agent.published_version == first
    with pytest.raises(ReleaseRefused):
        version_rollback(agent=prompted_agent, version=first, user=operator)
    with pytest.raises(UnknownVersion):
        version_rollback(
            agent=prompted_agent,
            version=make_agent().versions.create(number=1, config_hash="x", snapshot={}),
            user=operator,
        )


def _started_version(agent, conversation: Conversation) -> AgentVersion:
    # The admission path the API takes, without its per-user throttle (200 conversations here).
    run = start_run(agent, conversation=conversation)
    Run.objects.filter(pk=run.pk).update(status="completed")
    return run.agent_version


def test_a_canary_sends_its_share_of_new_conversations_and_is_sticky(prompted_agent, operator):
    stable = version_publish(agent=prompted_agent, user=operator, note="Stable.").version
    _edit(prompted_agent, "Candidate.")
    candidate = canary_start(agent=prompted_agent, percent=25, user=operator, note="Try the candidate.").version

    conversations = [conversation_create(agent=prompted_agent) for _ in range(200)]
    first = {c.pk: _started_version(prompted_agent, c) for c in conversations}
    on_candidate = sum(1 for version in first.values() if version == candidate)
    assert set(first.values()) == {stable, candidate}
    # Binomial(200, 0.25): mean 50, standard deviation 6.1; these bounds are five deviations out.
    assert 19 <= on_candidate <= 81, on_candidate
    # The choice is stored on the conversation, and later messages stay on it, draft edits or not.
    _edit(prompted_agent, "Later draft.")
    for conversation in conversations[:40]:
        assert _started_version(prompted_agent, conversation) == first[conversation.pk]
        assert Conversation.objects.get(pk=conversation.pk).agent_version == first[conversation.pk]


def test_the_bucket_is_uniform_and_fixed_for_a_conversation():
    ids = [uuid.UUID(int=n) for n in range(10_000)]
    below = sum(1 for conversation_id in ids if canary_bucket(conversation_id=conversation_id, salt=7) < 20)
    # Fixed inputs, so this is exact: a fifth of 10 000 within two points.
    assert 1_800 <= below <= 2_200, below
    assert canary_bucket(conversation_id=ids[5], salt=7) == canary_bucket(conversation_id=ids[5], salt=7)
    assert all(0 <= canary_bucket(conversation_id=c, salt=3) < 100 for c in ids[:500])


def test_promote_makes_the_candidate_published_for_everyone(prompted_agent, caller, operator):
    api = client_for(caller)
    version_publish(agent=prompted_agent, user=operator, note="Stable.")
    _edit(prompted_agent, "Candidate.")
    candidate = canary_start(agent=prompted_agent, percent=50, user=operator, note="Canary.").version
    conversations = [_conversation(api, prompted_agent) for _ in range(10)]
    for conversation in conversations:
        _run_version(api, conversation)
    canary_promote(agent=prompted_agent, user=operator)
    prompted_agent.refresh_from_db()
    assert (
        prompted_agent.published_version == candidate
        and prompted_agent.canary_version is None
        and prompted_agent.canary_percent == 0
    )
    assert {_run_version(api, c) for c in conversations} == {candidate}


def test_aborting_the_canary_keeps_the_published_version(prompted_agent, caller, operator):
    api = client_for(caller)
    stable = version_publish(agent=prompted_agent, user=operator, note="Stable.").version
    _edit(prompted_agent, "Candidate.")
    canary_start(agent=prompted_agent, percent=99, user=operator, note="Canary.")
    conversations = [_conversation(api, prompted_agent) for _ in range(10)]
    for conversation in conversations:
        _run_version(api, conversation)
    canary_abort(agent=prompted_agent, user=operator, note="Candidate is worse.")
    assert {_run_version(api, c) for c in conversations} == {stable}
    assert {_run_version(api, _conversation(api, prompted_agent)) for _ in range(5)} == {stable}


def test_canary_actions_refuse_what_does_not_fit(prompted_agent, operator):
    with pytest.raises(ReleaseRefused):  # nothing published to compare with
        canary_start(agent=prompted_agent, percent=10, user=operator, note="x")
    version_publish(agent=prompted_agent, user=operator, note="Stable.")
    with pytest.raises(ReleaseRefused):  # the draft is the published version
        canary_start(agent=prompted_agent, percent=10, user=operator, note="x")
    _edit(prompted_agent, "Candidate.")
    for percent in (0, 100, -5):
        with pytest.raises(ReleaseRefused):
            canary_start(agent=prompted_agent, percent=percent, user=operator, note="x")
    with pytest.raises(ReleaseRefused):
        canary_promote(agent=prompted_agent, user=operator)
    canary_start(agent=prompted_agent, percent=10, user=operator, note="x")
    with pytest.raises(ReleaseRefused):  # one canary at a time, and no publish over it
        canary_start(agent=prompted_agent, percent=10, user=operator, note="x")
    with pytest.raises(ReleaseRefused):
        version_publish(agent=prompted_agent, user=operator, note="x")


def test_every_release_action_is_an_audit_row(prompted_agent, operator):
    first = version_publish(agent=prompted_agent, user=operator, note="One.").version
    _edit(prompted_agent, "Two.")
    second = version_publish(agent=prompted_agent, user=operator, note="Two.").version
    version_rollback(agent=prompted_agent, version=first, user=operator, note="Back.")
    _edit(prompted_agent, "Three.")
    third = canary_start(agent=prompted_agent, percent=30, user=operator, note="Three, carefully.").version
    canary_abort(agent=prompted_agent, user=operator, note="No.")
    canary_start(agent=prompted_agent, percent=40, user=operator, note="Again.")
    canary_promote(agent=prompted_agent, user=operator, note="Yes.")
    rows = list(
        AgentRelease.objects.filter(agent=prompted_agent)
        .order_by("pk")
        .values_list("action", "version", "previous_version", "canary_percent", "user", "note")
    )
    assert rows == [
        (ReleaseAction.PUBLISH, first.pk, None, None, operator.pk, "One."),
        (ReleaseAction.PUBLISH, second.pk, first.pk, None, operator.pk, "Two."),
        (ReleaseAction.ROLLBACK, first.pk, second.pk, None, operator.pk, "Back."),
        (ReleaseAction.CANARY_START, third.pk, first.pk, 30, operator.pk, "Three, carefully."),
        (ReleaseAction.CANARY_ABORT, third.pk, first.pk, 30, operator.pk, "No."),
        (ReleaseAction.CANARY_START, third.pk, first.pk, 40, operator.pk, "Again."),
        (ReleaseAction.CANARY_PROMOTE, third.pk, first.pk, 40, operator.pk, "Yes."),
    ]


def test_a_caller_may_target_a_version_only_with_the_permission(prompted_agent, operator):
    first = version_publish(agent=prompted_agent, user=operator, note="One.").version
    _edit(prompted_agent, "The draft.")
    plain = client_for(user_with(staff=False))
    conversation = _conversation(plain, prompted_agent)
    for version in ("draft", 1, "published"):
        response = _post(plain, conversation, version=version)
        assert response.status_code == 403, response.content
    assert not Run.objects.filter(conversation_id=conversation).exists()

    tester = client_for(user_with("agents.test_agent_version", staff=False))
    conversation = _conversation(tester, prompted_agent)
    draft = _run_version(tester, conversation, version="draft")
    assert _prompt(draft) == "The draft." and draft != first
    assert _run_version(tester, conversation, version=first.number) == first
    assert _run_version(tester, conversation, version=str(draft.number)) == draft
    assert _run_version(tester, conversation, version="published") == first
    # Targeting is for that message only: the conversation's released version is untouched.
    assert Conversation.objects.get(pk=conversation).agent_version is None
    assert _run_version(tester, conversation) == first


@pytest.mark.parametrize("version", ["", "v1", "0", "-1", "1.5", "drafts", "9" * 20, True, None, [1], {"n": 1}, 99])
def test_bad_versions_are_a_400(prompted_agent, version):
    tester = client_for(user_with("agents.test_agent_version", staff=False))
    conversation = _conversation(tester, prompted_agent)
    response = _post(tester, conversation, version=version)
    assert response.status_code == 400, (version, response.content)
    assert "version" in response.content.decode()
    assert not Run.objects.filter(conversation_id=conversation).exists()


def test_published_is_a_400_for_an_agent_never_published(prompted_agent):
    tester = client_for(user_with("agents.test_agent_version", staff=False))
    response = _post(tester, _conversation(tester, prompted_agent), version="published")
    assert response.status_code == 400 and "never been published" in response.content.decode()


def test_a_published_agent_post_costs_one_statement_less_than_a_draft_one(prompted_agent, caller, operator):
    api = client_for(caller)
    conversation = _conversation(api, prompted_agent)
    _run_version(api, conversation)  # warms the version cache
    with CaptureQueriesContext(connection) as queries:
        _post(api, conversation)
    # Read at once: the next request resets the connection's query log the capture indexes.
    draft_post = [query["sql"] for query in queries]
    Run.objects.filter(conversation_id=conversation).update(status="completed")

    version_publish(agent=prompted_agent, user=operator, note="One.")
    conversation = _conversation(api, prompted_agent)
    _run_version(api, conversation)  # the first message stores the conversation's version
    with CaptureQueriesContext(connection) as queries:
        _post(api, conversation)
    published_post = [query["sql"] for query in queries]
    # The draft's post reads the configuration state (agent_config_state); a published agent's
    # conversation knows its version, which the process has cached: no read at all.
    assert len(published_post) == len(draft_post) - 1, published_post
    assert not [sql for sql in published_post if "agents_agentversion" in sql or "agents_modelconfig" in sql]
