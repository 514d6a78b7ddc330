"""End users in the operator's tools: the admin's conversation and run lists filter and search by
end user (for those who may view them), the agent page sets the limits per end user (for those
who may change agents), and the try page speaks as an end user."""

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from conversations.models import Conversation, Run
from conversations.services import conversation_create
from tests.security.privileges import user_with
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db

CONVERSATIONS = reverse("admin:conversations_conversation_changelist")
RUNS = reverse("admin:conversations_run_changelist")


@pytest.fixture
def rows():
    """Conversations of bob, carol and nobody, with a run each."""
    agent, found = make_agent(), {"runs": {}}
    for name, end_user in (("bob", "bob@example.com"), ("carol", "carol"), ("nobody", "")):
        run = ledger_run(agent)
        Conversation.objects.filter(pk=run.conversation_id).update(title=f"question of {name}", end_user=end_user)
        found[name], found["runs"][name] = Conversation.objects.get(pk=run.conversation_id), run
    return found


@pytest.fixture
def viewer(client):
    client.force_login(user_with("conversations.view_conversation", "conversations.view_run"))
    return client


def _titles(page: str, rows: dict) -> set[str]:
    return {name for name in ("bob", "carol", "nobody") if rows[name].title in page}


def test_the_conversation_list_filters_and_searches_by_end_user(viewer, rows):
    page = viewer.get(CONVERSATIONS).content.decode()
    assert _titles(page, rows) == {"bob", "carol", "nobody"}
    # The end user column links to their rows.
    assert "?end_user=bob%40example.com" in page
    assert _titles(viewer.get(CONVERSATIONS, {"end_user": "bob@example.com"}).content.decode(), rows) == {"bob"}
    assert _titles(viewer.get(CONVERSATIONS, {"has_end_user": "no"}).content.decode(), rows) == {"nobody"}
    assert _titles(viewer.get(CONVERSATIONS, {"has_end_user": "yes"}).content.decode(), rows) == {"bob", "carol"}
    assert _titles(viewer.get(CONVERSATIONS, {"q": "carol"}).content.decode(), rows) == {"carol"}


def test_the_run_list_shows_and_filters_by_end_user(viewer, rows):
    page = viewer.get(RUNS).content.decode()
    assert "bob@example.com" in page and "carol" in page
    filtered = viewer.get(RUNS, {"end_user": "carol"}).content.decode()
    assert str(rows["runs"]["carol"].pk) in filtered and str(rows["runs"]["bob"].pk) not in filtered


def test_the_lists_need_the_view_permissions(client, rows):
    client.force_login(user_with("conversations.view_run"))
    assert client.get(CONVERSATIONS, {"end_user": "bob@example.com"}).status_code == 403
    client.force_login(user_with("conversations.view_conversation"))
    assert client.get(RUNS, {"end_user": "bob@example.com"}).status_code == 403


def test_the_agent_page_sets_the_limits_per_end_user_for_who_may_change_agents(client):
    agent = make_agent()
    url = reverse("admin:agents_agent_change", args=[agent.pk])
    client.force_login(user_with("agents.view_agent", "agents.change_agent"))
    page = client.get(url).content.decode()
    assert 'name="end_user_messages_per_minute"' in page and 'name="end_user_tokens_per_day"' in page
    client.force_login(user_with("agents.view_agent"))
    page = client.get(url).content.decode()
    assert "tokens per day per end user" in page.lower() and 'name="end_user_tokens_per_day"' not in page


def test_the_try_page_speaks_as_an_end_user(client, staff, no_enqueue):
    agent = make_agent(concurrent_messages="enqueue")
    send = reverse("monitoring:try-send")
    assert 'name="end_user"' in client.get(reverse("monitoring:try")).content.decode()
    first = client.post(send, {"agent": agent.pk, "content": "我在成都", "end_user": " u-7 "})
    assert first.status_code == 201, first.content
    conversation = Conversation.objects.get(pk=first.json()["conversation_id"])
    assert (conversation.end_user, conversation.owner) == ("u-7", staff)
    same = {"agent": agent.pk, "content": "明天呢？", "conversation": conversation.pk}
    assert client.post(send, {**same, "end_user": "u-7"}).status_code == 201
    # A conversation's end user is fixed: another one is another conversation.
    other = client.post(send, {**same, "end_user": "u-8"})
    assert other.status_code == 400 and "end user" in other.json()["message"]
    bad = client.post(send, {"agent": agent.pk, "content": "hi", "end_user": "a\x1bb"})
    assert bad.status_code == 400 and bad.json()["message"].startswith("end_user:")
    assert Run.objects.filter(conversation=conversation).count() == 2


def test_the_cli_keeps_a_conversations_end_user():
    conversation = conversation_create(agent=make_agent(), end_user="bob")
    with pytest.raises(CommandError, match="not with end user 'carol'"):
        call_command("agentry_chat", "hello", conversation=str(conversation.pk), end_user="carol")
    assert not Run.objects.exists()
