"""Workspaces and members in the admin: a workspace's owner changes its budgets and manages its
members and roles, seeing only their own workspace; only superusers add or delete workspaces;
a workspace never loses its last owner; other roles do not reach member management."""

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Membership, Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def two(db):
    alpha = Workspace.objects.get(pk=default_workspace_id())
    bravo = Workspace.objects.create(name="Bravo team", slug="bravo")
    return alpha, bravo


def signed_in(client, name: str, workspace, role: str) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    membership_set(user=user, workspace=workspace, role=role)
    client.force_login(user)
    return user


def test_an_owner_sees_and_changes_only_their_workspace_s_budgets(client, two):
    alpha, bravo = two
    signed_in(client, "owner", alpha, Role.OWNER)
    listing = client.get(reverse("admin:workspaces_workspace_changelist")).content.decode()
    assert alpha.name in listing and "Bravo team" not in listing
    changed = client.post(
        reverse("admin:workspaces_workspace_change", args=[alpha.pk]),
        {"daily_token_limit": "5000", "name": "Renamed", "slug": "renamed"},
    )
    assert changed.status_code == 302
    alpha.refresh_from_db()
    # The budget changes; the name and slug are the installation's.
    assert alpha.daily_token_limit == 5000 and alpha.name != "Renamed" and alpha.slug != "renamed"
    other = client.get(reverse("admin:workspaces_workspace_change", args=[bravo.pk]))
    assert other.status_code == 302 and other["Location"] == reverse("admin:index")
    assert client.get(reverse("admin:workspaces_workspace_add")).status_code == 403
    assert (
        client.post(reverse("admin:workspaces_workspace_delete", args=[alpha.pk]), {"post": "yes"}).status_code == 403
    )
    assert Workspace.objects.filter(pk=alpha.pk).exists()


def test_only_a_superuser_adds_a_workspace(client, two):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    added = client.post(reverse("admin:workspaces_workspace_add"), {"name": "Charlie", "slug": "charlie"})
    assert added.status_code == 302 and Workspace.objects.filter(slug="charlie").exists()


def test_an_owner_manages_their_members_and_roles_and_nobody_else_s(client, two):
    alpha, bravo = two
    signed_in(client, "owner", alpha, Role.OWNER)
    newcomer = User.objects.create_user("newcomer")
    Membership.objects.filter(user=newcomer).delete()
    stranger = User.objects.create_user("stranger")
    theirs = membership_set(user=stranger, workspace=bravo, role=Role.OWNER)
    added = client.post(
        reverse("admin:workspaces_membership_add"),
        {"workspace": alpha.pk, "user": newcomer.pk, "role": Role.VIEWER},
    )
    assert added.status_code == 302
    joined = Membership.objects.get(user=newcomer)
    assert joined.workspace == alpha and joined.role == Role.VIEWER
    # Into another workspace: not a choice (the form has no workspace: a member is added to the
    # workspace the owner acts in, where the newcomer already is).
    refused = client.post(
        reverse("admin:workspaces_membership_add"),
        {"workspace": bravo.pk, "user": newcomer.pk, "role": Role.OWNER},
    )
    assert refused.status_code == 200 and refused.context["adminform"].form.errors
    assert not Membership.objects.filter(user=newcomer, workspace=bravo).exists()
    promoted = client.post(reverse("admin:workspaces_membership_change", args=[joined.pk]), {"role": Role.OPERATOR})
    assert promoted.status_code == 302
    joined.refresh_from_db()
    assert joined.role == Role.OPERATOR
    listing = client.get(reverse("admin:workspaces_membership_changelist")).content.decode()
    assert "newcomer" in listing and "stranger" not in listing
    assert client.get(reverse("admin:workspaces_membership_change", args=[theirs.pk])).status_code == 404
    client.post(reverse("admin:workspaces_membership_change", args=[theirs.pk]), {"role": Role.VIEWER})
    client.post(reverse("admin:workspaces_membership_delete", args=[theirs.pk]), {"post": "yes"})
    theirs.refresh_from_db()
    assert theirs.role == Role.OWNER


def test_the_last_owner_is_neither_demoted_nor_removed(client, two):
    alpha, bravo = two
    owner = signed_in(client, "owner", alpha, Role.OWNER)
    mine = Membership.objects.get(user=owner, workspace=alpha)
    demoted = client.post(reverse("admin:workspaces_membership_change", args=[mine.pk]), {"role": Role.VIEWER})
    assert demoted.status_code == 200
    assert "last owner" in str(demoted.context["adminform"].form.errors["role"])
    removed = client.post(reverse("admin:workspaces_membership_delete", args=[mine.pk]), {"post": "yes"}, follow=True)
    assert "last owner" in removed.content.decode()
    mine.refresh_from_db()
    assert mine.role == Role.OWNER
    # With a second owner, the first may step down.
    membership_set(user=User.objects.create_user("second"), workspace=alpha, role=Role.OWNER)
    stepped = client.post(reverse("admin:workspaces_membership_change", args=[mine.pk]), {"role": Role.VIEWER})
    assert stepped.status_code == 302
    mine.refresh_from_db()
    assert mine.role == Role.VIEWER


@pytest.mark.parametrize("role", [Role.BUILDER, Role.OPERATOR, Role.APPROVER, Role.VIEWER])
def test_other_roles_do_not_manage_members(client, two, role):
    alpha, bravo = two
    me = signed_in(client, "member", alpha, role)
    mine = Membership.objects.get(user=me, workspace=alpha)
    # Every role that reads the workspace reads its member list; only owners change it.
    listed = client.get(reverse("admin:workspaces_membership_changelist")).status_code
    assert listed == (403 if role == Role.APPROVER else 200)
    assert client.get(reverse("admin:workspaces_membership_add")).status_code == 403
    assert (
        client.post(reverse("admin:workspaces_membership_change", args=[mine.pk]), {"role": Role.OWNER}).status_code
        == 403
    )
    mine.refresh_from_db()
    assert mine.role == role
    assert client.get(reverse("admin:workspaces_workspace_add")).status_code == 403
