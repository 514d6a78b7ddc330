"""Acting on one's own (talking to an agent, one's end users' memories, deciding one's runs'
approvals) is one decision in workspaces.access: the custom role may as before workspaces, a
role needs the permission, a token's ceiling applies either way, and starting runs is that
decision for conversations.add_run."""

import pytest
from django.contrib.auth.models import User

import api.common
from tests.support.factories import make_user
from workspaces.access import Binding, may_act_on_own, may_start_runs, workspace_bind
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db

MEMORIES, RUNS = "memory.view_memory", "conversations.add_run"


@pytest.fixture
def workspace():
    return Workspace.objects.create(name="Alpha", slug="alpha")


def _bound(workspace, role, limit=None, user=None):
    user = user or make_user()
    workspace_bind(user, Binding(workspace=workspace, role=role, limit=limit))
    return user


@pytest.mark.parametrize(
    ("role", "memories", "runs"),
    [
        (Role.CUSTOM, True, True),
        (Role.OWNER, True, True),
        (Role.OPERATOR, True, True),
        (Role.VIEWER, True, False),
        (Role.APPROVER, False, False),
    ],
)
def test_each_role_acts_on_its_own_as_its_permissions_say(workspace, role, memories, runs):
    user = _bound(workspace, role)
    assert may_act_on_own(user, MEMORIES) is memories
    assert may_act_on_own(user, RUNS) is runs is may_start_runs(user)


def test_a_tokens_ceiling_refuses_even_the_custom_role_and_a_superuser(workspace):
    assert not may_act_on_own(_bound(workspace, Role.CUSTOM, limit=frozenset({RUNS})), MEMORIES)
    assert may_act_on_own(_bound(workspace, Role.CUSTOM, limit=frozenset({RUNS})), RUNS)
    root = User.objects.create_superuser(username="root", password="pw")
    assert may_act_on_own(_bound(None, None, user=root), MEMORIES)
    assert not may_act_on_own(_bound(None, None, limit=frozenset(), user=root), MEMORIES)


def test_an_inactive_account_and_no_account_act_on_nothing(workspace):
    user = _bound(workspace, Role.CUSTOM)
    user.is_active = False
    assert not may_act_on_own(user, MEMORIES) and not may_act_on_own(None, MEMORIES)


def test_the_decision_lives_in_workspaces_access_only():
    assert not hasattr(api.common, "may_own")
