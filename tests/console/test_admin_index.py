"""The admin index is grouped by task (console/admin_index.py): Build, Operate, Improve, Reach,
Govern in that order, each listing only what the user may open; the read-only ledgers are not
peers of "Agents" there but their pages still answer; nothing registered goes unplaced."""

import re

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.urls import reverse

from console.admin_index import GROUPS, LEDGER, index_groups
from console.navigation import OperatorLink
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db

ORDER = ["build", "operate", "improve", "reach", "govern"]


def _groups(page: str) -> dict[str, dict[str, list[str]]]:
    """group key → its operator pages and model labels, in the order the index shows them."""
    found = {}
    for key, body in re.findall(r'data-group="([^"]+)">(.*?)</table>', page, re.S):
        found[key] = {
            "pages": re.findall(r'data-page="([^"]+)"', body),
            "models": re.findall(r'data-model="([^"]+)"', body),
        }
    return found


def _member(client, name: str, role: str):
    user = get_user_model().objects.create_user(name, password="pw", is_staff=True)
    membership_set(user=user, workspace=Workspace.objects.get(pk=default_workspace_id()), role=role)
    client.force_login(user)
    return user


def test_every_registered_admin_model_is_in_a_group_or_declared_a_ledger():
    grouped = [label for group in GROUPS for label in group.models]
    assert len(grouped) == len(set(grouped)), "a model listed in two groups"
    assert not set(grouped) & LEDGER
    registered = {model._meta.label for model in admin.site._registry}
    assert registered - set(grouped) - LEDGER == set()
    # No stale names: every label of a group is a registered admin model.
    assert set(grouped) - registered == set()


def test_a_superuser_sees_every_group_in_order_and_no_ledger(admin_client):
    response = admin_client.get(reverse("admin:index"))
    page = response.content.decode()

    groups = _groups(page)
    assert list(groups) == ORDER
    for group in GROUPS:
        assert groups[group.key]["models"] == list(group.models)
    assert groups["operate"]["pages"] == ["monitoring", "guardrails", "approvals", "try", "workspace-usage"]
    assert groups["reach"]["pages"] == ["api-docs"]
    assert groups["build"]["models"][:2] == ["agents.Agent", "agents.AgentVersion"]
    assert "auth.User" in groups["govern"]["models"] and "audit.ConfigChange" in groups["govern"]["models"]
    # Headings and leads are there, the ledgers are not listed anywhere on the index.
    assert '<span class="section">Build</span>' in page and "model configs, tools and MCP servers" in page
    for label in LEDGER:
        assert f'data-model="{label}"' not in page
    assert "LLM calls" not in page.split('id="task-index"')[1] and 'data-group="other"' not in page
    # Who is signed in and the way out stay in the header.
    user_tools = page.split('id="user-tools"')[1].split("</div>")[0]
    assert "<strong>admin</strong>" in user_tools
    assert 'id="logout-form"' in user_tools and "Log out" in user_tools


def test_ledger_pages_still_answer_for_a_superuser(admin_client):
    for model in admin.site._registry:
        if model._meta.label in LEDGER:
            url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
            assert admin_client.get(url).status_code == 200, url


def test_per_app_index_pages_keep_django_s_list(admin_client):
    page = admin_client.get(reverse("admin:app_list", args=["agents"])).content.decode()
    assert 'class="app-agents module' in page and "Agent versions" in page


def test_a_viewer_sees_the_workspace_s_groups_without_accounts_or_adding(client):
    _member(client, "watcher", Role.VIEWER)
    page = client.get(reverse("admin:index")).content.decode()

    groups = _groups(page)
    assert list(groups) == ORDER
    assert groups["build"]["models"][0] == "agents.Agent"
    assert groups["operate"]["pages"][:2] == ["monitoring", "guardrails"]
    assert "approvals" not in groups["operate"]["pages"] and "try" not in groups["operate"]["pages"]
    assert "conversations.Run" in groups["operate"]["models"]
    # Django accounts are not a workspace's: a viewer of the workspace does not see them.
    assert "auth.User" not in groups["govern"]["models"] and "auth.Group" not in groups["govern"]["models"]
    assert "workspaces.Membership" in groups["govern"]["models"]
    index = page.split('id="task-index"')[1]
    assert 'class="addlink"' not in index and 'class="changelink"' not in index


def test_an_approver_sees_only_the_approvals_and_the_api(client):
    _member(client, "decider", Role.APPROVER)
    page = client.get(reverse("admin:index")).content.decode()

    assert _groups(page) == {
        "operate": {"pages": ["approvals"], "models": ["conversations.Approval"]},
        "reach": {"pages": ["api-docs"], "models": []},
    }
    assert "<strong>decider</strong>" in page.split('id="user-tools"')[1]


def test_a_model_placed_nowhere_is_shown_under_other():
    # Built as Django builds the index's app list; a page of no group is kept too.
    user_model = get_user_model()
    entry = {"model": user_model, "name": "Users", "object_name": "User"}
    stray = type("Stray", (), {"_meta": type("Meta", (), {"label": "stray.Stray"})})
    app_list = [{"models": [entry, {"model": stray, "name": "Strays", "object_name": "Stray"}]}]
    links = [OperatorLink("new-page", "New page", "/new/", "")]

    groups = index_groups(app_list, links)

    assert [group.key for group in groups] == ["govern", "other"]
    assert groups[1].models[0]["name"] == "Strays" and [link.key for link in groups[1].pages] == ["new-page"]


def test_the_index_costs_a_fixed_number_of_statements(admin_client, client, django_assert_max_num_queries):
    # Session, user, the pending approvals counted once for the header and the index, the
    # switcher's workspace, recent actions: five for a superuser and for a member alike.
    admin_client.get(reverse("admin:index"))
    with django_assert_max_num_queries(5):
        assert admin_client.get(reverse("admin:index")).status_code == 200
    _member(client, "watcher", Role.VIEWER)
    client.get(reverse("admin:index"))
    with django_assert_max_num_queries(5):
        assert client.get(reverse("admin:index")).status_code == 200
