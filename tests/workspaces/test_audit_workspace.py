"""The configuration audit per workspace: each change carries its object's workspace (a
workspace's own, a membership's), and the list, a change's page and the export show a workspace
only its own changes; a superuser acting installation-wide sees them all."""

import importlib
import json

import pytest
from asgiref.sync import async_to_sync
from django.apps import apps as django_apps
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse

from agents.models import Agent, AgentTool, ModelConfig
from audit.models import Action, ConfigChange
from conversations.tokens import api_token_create
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tools.models import ToolDefinition
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Membership, Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db

URL = "/api/v1/config-changes/export/"


@pytest.fixture
def two():
    """The first workspace with an agent "alpha", a second with an agent "beta"."""
    default = Workspace.objects.get(pk=default_workspace_id())
    research = Workspace.objects.create(name="Research", slug="research")
    make_agent(slug="alpha", model_config=ModelConfigFactory(name="alpha-model"))
    model = ModelConfigFactory(name="beta-model", workspace=research)
    make_agent(slug="beta", model_config=model, workspace=research)
    return default, research


def _workspaces_of(model, **lookup) -> set:
    rows = ConfigChange.objects.filter(content_type=ContentType.objects.get_for_model(model), **lookup)
    return set(rows.values_list("workspace_id", flat=True))


def test_each_change_carries_the_workspace_of_its_object(two):
    default, research = two
    beta = Agent.objects.get(slug="beta")
    assert _workspaces_of(Agent, object_id=str(beta.pk)) == {research.pk}
    assert _workspaces_of(ModelConfig, object_repr="alpha-model (demo)") == {default.pk}
    # Through its agent (AgentTool.workspace_path).
    link = AgentTool.objects.create(agent=beta, tool=AgentTool._meta.get_field("tool").related_model.objects.first())
    assert _workspaces_of(AgentTool, object_id=str(link.pk)) == {research.pk}
    # A workspace is its own; its budgets are audited like any configuration.
    research.daily_token_limit = 1000
    research.save()
    change = ConfigChange.objects.filter(content_type=ContentType.objects.get_for_model(Workspace)).latest("id")
    assert change.action == Action.CHANGE and change.workspace_id == research.pk
    assert change.changes == {"daily_token_limit": [None, 1000]}


def test_members_and_their_role_changes_are_audited_in_their_workspace(two):
    _default, research = two
    person = make_user()
    membership = membership_set(user=person, workspace=research, role=Role.VIEWER)
    membership_set(user=person, workspace=research, role=Role.BUILDER)
    rows = ConfigChange.objects.filter(
        content_type=ContentType.objects.get_for_model(Membership), object_id=str(membership.pk)
    ).order_by("id")
    assert [(r.action, r.workspace_id) for r in rows] == [
        (Action.CREATE, research.pk),
        (Action.CHANGE, research.pk),
    ]
    assert rows[1].changes["role"] == ["viewer", "builder"]

    # Deleting a workspace (its memberships go with it) keeps its history, its own delete last.
    empty = Workspace.objects.create(name="Empty", slug="empty")
    membership_set(user=person, workspace=empty, role=Role.OWNER)
    pk = empty.pk
    empty.delete()
    rows = ConfigChange.objects.filter(workspace_id=pk).order_by("id")
    tools = ContentType.objects.get_for_model(ToolDefinition)
    assert [row.action for row in rows if row.content_type_id != tools.pk] == [
        Action.CREATE,
        Action.CREATE,
        Action.DELETE,
        Action.DELETE,
    ]
    # Its built-in tools (made with it, workspaces.names) went with it, each delete a row.
    assert {row.action for row in rows if row.content_type_id == tools.pk} == {Action.DELETE}


def _owner_of(workspace):
    user = make_user(staff=True)
    Membership.objects.filter(user=user).delete()
    membership_set(user=user, workspace=workspace, role=Role.OWNER)
    return user


def test_the_admin_list_and_a_change_page_show_only_the_workspace_own(client, two):
    default, research = two
    client.force_login(_owner_of(research))
    response = client.get(reverse("admin:audit_configchange_changelist"))
    assert response.status_code == 200
    shown = {change.workspace_id for change in response.context["cl"].result_list}
    assert shown == {research.pk}
    other = ConfigChange.objects.filter(workspace=default).first()
    own = ConfigChange.objects.filter(workspace=research).first()
    assert client.get(reverse("admin:audit_configchange_change", args=[own.pk])).status_code == 200
    # Another workspace's change is as missing as one that never was.
    foreign = client.get(reverse("admin:audit_configchange_change", args=[other.pk]))
    missing = client.get(reverse("admin:audit_configchange_change", args=[10**9]))
    assert foreign.status_code == missing.status_code == 404
    assert foreign.content == missing.content


def _body(response) -> str:
    async def read():
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)().decode()


@pytest.mark.django_db(transaction=True)
def test_the_export_holds_the_token_workspace_changes_only(client, two):
    default, research = two
    user = _owner_of(research)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api_token_create(user=user, name='x', workspace=research)[1]}"}
    response = client.get(URL, **auth)
    assert response.status_code == 200
    records = [json.loads(line) for line in _body(response).splitlines()]
    assert records and {r["workspace_id"] for r in records} == {research.pk}
    assert len(records) == ConfigChange.objects.filter(workspace=research).count()
    # Another workspace's agent is no agent at all: the same 400 as a slug that never was.
    foreign = client.get(URL, {"agent": "alpha"}, **auth)
    missing = client.get(URL, {"agent": "nobody"}, **auth)
    assert foreign.status_code == missing.status_code == 400
    assert list(json.loads(foreign.content)["extra"]["fields"]) == ["agent"]
    assert foreign.content.decode().replace("alpha", "nobody") == missing.content.decode()

    root = make_user(staff=True)
    root.is_superuser = True
    root.save()
    Membership.objects.filter(user=root).delete()
    client.force_login(root)
    everything = [json.loads(line) for line in _body(client.get(URL)).splitlines()]
    assert {r["workspace_id"] for r in everything} >= {default.pk, research.pk}
    assert len(everything) == ConfigChange.objects.count()


def test_the_migration_fills_each_row_from_its_object_its_agent_or_the_first_workspace(two):
    default, research = two
    beta = Agent.objects.get(slug="beta")
    gone = ConfigChange.objects.filter(object_repr="beta-model (demo)").get()
    gone.object_id = "999999999"  # its object no longer exists
    gone.agent_id = None
    gone.save()
    orphan_of_beta = ConfigChange.objects.create(
        action=Action.DELETE,
        source="system",
        content_type=ContentType.objects.get_for_model(AgentTool),
        object_id="999999998",
        object_repr="a removed link",
        agent_id=beta.pk,
    )
    ConfigChange.objects.update(workspace=None)

    migration = importlib.import_module("audit.migrations.0002_configchange_workspace")
    migration.workspaces_fill(django_apps, None)

    assert not ConfigChange.objects.filter(workspace__isnull=True).exists()
    assert ConfigChange.objects.get(object_repr="Research").workspace_id == research.pk
    assert ConfigChange.objects.get(content_type__model="agent", object_id=str(beta.pk)).workspace_id == research.pk
    assert ConfigChange.objects.get(pk=orphan_of_beta.pk).workspace_id == research.pk
    assert ConfigChange.objects.get(pk=gone.pk).workspace_id == default.pk
    assert ConfigChange.objects.get(object_repr="alpha-model (demo)").workspace_id == default.pk
