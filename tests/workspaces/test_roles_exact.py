"""A role is exact: a member holds their role's permissions in its workspace and no others, so a
Django group's permissions apply only where the member's role is custom (docs/workspaces.md)."""

import pytest
from django.contrib.auth.models import Group, Permission

from tests.support.factories import make_user
from workspaces.access import Binding, binding_for, workspace_bind
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role, role_permissions

pytestmark = pytest.mark.django_db
OPERATE = "conversations.operate_run"


def _operators_group() -> Group:
    group = Group.objects.create(name="on call")
    group.permissions.add(Permission.objects.get(codename="operate_run"))
    return group


@pytest.mark.parametrize("role", [Role.VIEWER, Role.APPROVER, Role.BUILDER])
def test_a_group_does_not_widen_a_role(role):
    workspace = Workspace.objects.get(pk=default_workspace_id())
    person = make_user(staff=True, groups=[_operators_group()])
    membership_set(user=person, workspace=workspace, role=role)
    workspace_bind(person, binding_for(person, workspace.pk))
    assert OPERATE not in role_permissions(role)
    assert not person.has_perm(OPERATE)


def test_a_custom_member_keeps_their_groups_and_an_operator_has_it_by_role():
    workspace = Workspace.objects.get(pk=default_workspace_id())
    custom = make_user(staff=True, groups=[_operators_group()])
    membership_set(user=custom, workspace=workspace, role=Role.CUSTOM)
    workspace_bind(custom, binding_for(custom, workspace.pk))
    assert custom.has_perm(OPERATE)
    operator = make_user(staff=True)
    membership_set(user=operator, workspace=workspace, role=Role.OPERATOR)
    workspace_bind(operator, binding_for(operator, workspace.pk))
    assert operator.has_perm(OPERATE) and not operator.has_perm("agents.change_agent")


def test_a_tokens_ceiling_refuses_what_the_owner_holds():
    workspace = Workspace.objects.get(pk=default_workspace_id())
    owner = make_user(staff=True)
    membership_set(user=owner, workspace=workspace, role=Role.OWNER)
    workspace_bind(owner, Binding(workspace=workspace, role=Role.OWNER, limit=role_permissions(Role.VIEWER)))
    assert owner.has_perm("conversations.view_run") and not owner.has_perm(OPERATE)
