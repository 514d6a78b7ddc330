"""The read a posted message starts with: for every kind of user it finds what the visibility
and agent-access rules say (conversations_visible_to, agents_usable_by), through a statement
built once per kind of user and then only bound."""

import uuid

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db.models import Exists, OuterRef

from agents.selectors import agents_usable_by
from conversations.selectors import conversation_for_post, conversations_visible_to
from platform_site import statements
from tests.support.factories import make_agent, make_user
from tests.support.runs import start_run

pytestmark = pytest.mark.django_db


def _through_the_orm(user, conversation_id):
    """What the post read before it was built once: the same rules, through the ORM."""
    usable = agents_usable_by(user=user).filter(pk=OuterRef("agent_id"))
    found = (
        conversations_visible_to(user=user)
        .annotate(agent_usable=Exists(usable))
        .filter(pk=conversation_id)
        .values_list("id", "agent_id", "owner_id", "agent_usable")
    )
    return found.first()


def _as_read(conversation):
    if conversation is None:
        return None
    return (conversation.pk, conversation.agent_id, conversation.owner_id, conversation.agent_usable)


@pytest.fixture
def world():
    support = Group.objects.create(name="support")
    alice, bob = make_user(groups=[support]), make_user()
    reader = make_user(staff=True)
    reader.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    root = User.objects.create_superuser(username=f"root-{uuid.uuid4().hex[:6]}", password="pw")
    open_agent, restricted = make_agent(slug="open"), make_agent(slug="restricted")
    restricted.allowed_groups.set([support])
    conversations = []
    for owner in (alice, bob, reader):
        for agent in (open_agent, restricted):
            conversation = start_run(agent, "hi").conversation
            conversation.owner = owner
            conversation.save(update_fields=["owner"])
            conversations.append(conversation)
    return {"users": [alice, bob, reader, root], "conversations": conversations, "restricted": restricted}


def test_every_user_reads_what_the_rules_say(world, monkeypatch):
    monkeypatch.setattr(statements, "_templates", {})
    # Twice over: the first call of each kind of user builds the statement, the second only binds it.
    for _ in range(2):
        for user in world["users"]:
            for conversation in world["conversations"]:
                expected = _through_the_orm(user, conversation.pk)
                assert _as_read(conversation_for_post(user=user, conversation_id=str(conversation.pk))) == expected
    # Alice (in the group) and Bob (not) see only their own; the reader and the superuser see all.
    alice, bob, reader, root = world["users"]
    reads = {
        user.username: [
            _as_read(conversation_for_post(user=user, conversation_id=c.pk)) for c in world["conversations"]
        ]
        for user in world["users"]
    }
    assert [read is not None for read in reads[alice.username]] == [True, True, False, False, False, False]
    assert [read[3] for read in reads[bob.username] if read] == [True, False]  # the restricted agent is not his
    assert all(reads[reader.username]) and all(reads[root.username])
    assert all(read[3] for read in reads[root.username])


def test_a_conversation_that_does_not_exist_or_a_malformed_id_reads_nothing(world):
    alice = world["users"][0]
    assert conversation_for_post(user=alice, conversation_id=str(uuid.uuid4())) is None
    assert conversation_for_post(user=alice, conversation_id="not-an-id") is None


def test_losing_the_group_or_the_agent_shows_on_the_next_read(world):
    alice = world["users"][0]
    conversation = world["conversations"][1]  # alice's, with the restricted agent
    assert conversation_for_post(user=alice, conversation_id=conversation.pk).agent_usable is True
    alice.groups.clear()
    assert conversation_for_post(user=alice, conversation_id=conversation.pk).agent_usable is False
    alice.groups.add(Group.objects.get(name="support"))
    world["restricted"].is_active = False
    world["restricted"].save(update_fields=["is_active"])
    assert conversation_for_post(user=alice, conversation_id=conversation.pk).agent_usable is False
