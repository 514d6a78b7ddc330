"""The agent a new conversation or a chat completion names by slug: for every kind of user it is
what agents_usable_by says, through a statement built once per kind of user and then only bound."""

import uuid
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, User
from django.forms.models import model_to_dict

from agents.selectors import agent_usable_by, agents_usable_by
from platform_site import statements
from tests.support.factories import make_agent, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    support = Group.objects.create(name="support")
    alice, bob = make_user(groups=[support]), make_user()
    root = User.objects.create_superuser(username=f"root-{uuid.uuid4().hex[:6]}", password="pw")
    open_agent = make_agent(slug="open", run_cost_budget=Decimal("1.25"))
    restricted = make_agent(slug="restricted")
    restricted.allowed_groups.set([support])
    retired = make_agent(slug="retired", is_active=False)
    return {"users": [alice, bob, root], "agents": [open_agent, restricted, retired]}


def _as_read(agent):
    return None if agent is None else model_to_dict(agent)


def test_every_user_gets_what_the_rules_say(world, monkeypatch):
    monkeypatch.setattr(statements, "_templates", {})
    slugs = ["open", "restricted", "retired", "missing", ""]
    # Twice over: the first call of each kind of user builds the statement, the second only binds it.
    for _ in range(2):
        for user in world["users"]:
            for slug in slugs:
                expected = agents_usable_by(user=user).filter(slug=slug).first()
                assert _as_read(agent_usable_by(user=user, slug=slug)) == _as_read(expected)
    alice, bob, root = world["users"]
    usable = {
        user.username: [agent_usable_by(user=user, slug=slug) is not None for slug in slugs] for user in world["users"]
    }
    assert usable[alice.username] == [True, True, False, False, False]
    assert usable[bob.username] == [True, False, False, False, False]  # not in the group
    assert usable[root.username] == [True, True, False, False, False]  # a retired agent is no one's


def test_the_agent_read_is_the_whole_row(world):
    alice = world["users"][0]
    agent = agent_usable_by(user=alice, slug="open")
    assert agent.run_cost_budget == Decimal("1.25") and not agent.get_deferred_fields()
    assert model_to_dict(agent) == model_to_dict(world["agents"][0])


def test_losing_the_group_shows_on_the_next_read(world):
    alice = world["users"][0]
    assert agent_usable_by(user=alice, slug="restricted") is not None
    alice.groups.clear()
    assert agent_usable_by(user=alice, slug="restricted") is None
