"""Configuration names are unique per workspace (workspaces.names): the same name in two workspaces
is two objects, neither refused nor confirmed to the other; a name taken in the same workspace is a
form error (never a 500). The built-in python tools exist in every workspace, so an agent of a
second workspace uses them."""

import pytest
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from rest_framework.test import APIClient

from agents.models import AgentTool, ModelConfig
from alerts.models import AlertRule
from conversations.models import ToolInvocation
from conversations.tokens import api_token_create
from evals.models import EvalSuite
from knowledge.models import KnowledgeBase
from tests.support.factories import ModelConfigFactory, make_agent, make_user, registered_tools_synced
from tests.support.runs import advance, last_answer, start_run
from tools.models import MCPServer, ToolDefinition
from tools.registry import registry
from tools.services import tool_definitions_import_openapi, tool_definitions_sync_from_registry
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.names import NAME_TAKEN
from workspaces.roles import Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def places():
    """Workspace A (the first) and B, each with an owner of its own."""
    a = Workspace.objects.get(pk=default_workspace_id())
    b = Workspace.objects.create(name="Bravo", slug="bravo")
    owner_a, owner_b = make_user(staff=True), make_user(staff=True)
    membership_set(user=owner_a, workspace=a, role=Role.OWNER)
    membership_set(user=owner_b, workspace=b, role=Role.OWNER)
    return a, b, owner_a, owner_b


def _post_data(page, **fields) -> dict:
    """The add or change page's form as the browser would post it (its initial values), no inline
    row added, with `fields` over it."""
    form = page.context["adminform"].form
    data = {}
    for name in form.fields:
        value = form[name].value()
        if value is None or value is False:
            continue
        data[name] = "on" if value is True else value
    for inline in page.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        for name in management.fields:
            data[management.add_prefix(name)] = management[name].value()
        data[management.add_prefix("TOTAL_FORMS")] = management["INITIAL_FORMS"].value()
    return {**data, **fields}


def _admin_add(client, model, /, **fields):
    url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/add/"
    return client.post(url, _post_data(client.get(url), **fields))


# Each workspace model with a name, and what its add form needs besides the name.
NAMED = [
    (
        ToolDefinition,
        "send_email",
        {"description": "Sends an e-mail.", "kind": "http", "http_method": "POST", "http_url": "https://x.test/"},
    ),
    (MCPServer, "mail", {"transport": "streamable_http", "url": "https://mcp.example.com/mcp"}),
    (ModelConfig, "house-model", {"base_url": "http://127.0.0.1:9/v1", "model": "m"}),
    (KnowledgeBase, "handbook", {}),
    (EvalSuite, "regressions", {}),
    (AlertRule, "too many tokens", {"kind": "tokens", "threshold": 1000}),
]


@pytest.mark.parametrize(("model", "name", "fields"), NAMED, ids=[model.__name__ for model, _n, _f in NAMED])
def test_the_same_name_in_two_workspaces_and_a_taken_one_in_the_same(client, places, model, name, fields):
    a, b, owner_a, owner_b = places
    for owner in (owner_a, owner_b):
        client.force_login(owner)
        saved = _admin_add(client, model, name=name, **fields)
        assert saved.status_code == 302, saved.context["adminform"].form.errors
    assert set(model.objects.filter(name=name).values_list("workspace_id", flat=True)) == {a.pk, b.pk}

    # B's owner again: the name is taken in B, a form error (the database would refuse it).
    refused = _admin_add(client, model, name=name, **fields)
    assert refused.status_code == 200
    assert refused.context["adminform"].form.non_field_errors() == [str(NAME_TAKEN)]
    assert model.objects.filter(name=name, workspace=b).count() == 1


def test_renaming_to_a_name_taken_in_the_workspace_is_a_form_error(client, places):
    _a, b, _owner_a, owner_b = places
    ModelConfigFactory(workspace=b, name="taken")
    other = ModelConfigFactory(workspace=b, name="free")
    client.force_login(owner_b)
    url = f"/admin/agents/modelconfig/{other.pk}/change/"
    refused = client.post(url, _post_data(client.get(url), name="taken"))
    assert refused.status_code == 200
    assert refused.context["adminform"].form.non_field_errors() == [str(NAME_TAKEN)]
    other.refresh_from_db()
    assert other.name == "free"


def test_a_superuser_choosing_the_workspace_gets_the_same_form_error(admin_client, places):
    _a, b, _owner_a, _owner_b = places
    EvalSuite.objects.create(workspace=b, name="shared")
    assert _admin_add(admin_client, EvalSuite, name="shared").status_code == 302  # the first workspace
    refused = _admin_add(admin_client, EvalSuite, name="shared", workspace=b.pk)
    assert refused.status_code == 200
    assert refused.context["adminform"].form.non_field_errors() == [str(NAME_TAKEN)]


def test_the_database_refuses_a_duplicate_name_in_one_workspace(places):
    a, b, _owner_a, _owner_b = places
    ModelConfigFactory(workspace=a, name="twice")
    ModelConfigFactory(workspace=b, name="twice")
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelConfigFactory(workspace=b, name="twice")


def test_the_api_makes_a_suite_named_as_another_workspaces_and_refuses_its_own_name(places):
    a, b, _owner_a, owner_b = places
    EvalSuite.objects.create(workspace=a, name="nightly")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=owner_b, name='t', workspace=b)[1]}")
    made = api.post("/api/v1/eval-suites/", {"name": "nightly"}, format="json")
    assert made.status_code == 201, made.content
    assert EvalSuite.objects.get(pk=made.json()["id"]).workspace == b
    again = api.post("/api/v1/eval-suites/", {"name": "nightly"}, format="json")
    assert again.status_code == 400
    assert str(NAME_TAKEN) in again.content.decode()


def test_an_openapi_import_in_b_is_not_stopped_by_as_tool_of_the_same_name(places):
    a, b, _owner_a, _owner_b = places
    document = (
        '{"openapi": "3.0.0", "info": {"title": "t", "version": "1"}, "servers": [{"url": "https://api.test"}],'
        ' "paths": {"/orders": {"get": {"operationId": "list_orders", "responses": {"200": {"description": "ok"}}}}}}'
    )
    assert tool_definitions_import_openapi(document=document, workspace_id=a.pk).created == ["list_orders"]
    assert tool_definitions_import_openapi(document=document, workspace_id=b.pk).created == ["list_orders"]
    assert ToolDefinition.objects.filter(name="list_orders").count() == 2


def test_every_workspace_has_the_built_in_tools(places):
    a, b, _owner_a, _owner_b = places
    names = set(registry.names())
    # A workspace made after the upgrade gets them when it is created.
    assert set(ToolDefinition.objects.filter(workspace=b, kind="python").values_list("name", flat=True)) == names
    # The sync keeps them in every workspace, leaving the approval policy an operator chose.
    ToolDefinition.objects.filter(workspace=b, name="calculator").update(description="old", approval_policy="always")
    tool_definitions_sync_from_registry()
    for place in (a, b):
        assert set(ToolDefinition.objects.filter(workspace=place, kind="python").values_list("name", flat=True)) == (
            names
        )
    calculator = ToolDefinition.objects.get(workspace=b, name="calculator")
    assert (calculator.description, calculator.approval_policy) == (registry.get("calculator").description, "always")


def test_an_agent_of_a_second_workspace_uses_the_built_in_calculator(fake_llm, places):
    _a, b, _owner_a, _owner_b = places
    registered_tools_synced()
    steps = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"content": "it is 42"}]
    script = fake_llm.script("calc-in-b", {"scenarios": [{"match": ".", "steps": steps}]})
    model = ModelConfigFactory(workspace=b, base_url=fake_llm.api_base, model=script)
    agent = make_agent(workspace=b, model_config=model, tools=["calculator"])
    link = AgentTool.objects.get(agent=agent)
    link.full_clean()  # its workspace's tool: the references check passes
    assert link.tool.workspace == b

    run = advance(start_run(agent, "what is six times seven?"))
    assert run.status == "completed"
    invocation = ToolInvocation.objects.get(run=run)
    assert (invocation.tool_name, invocation.status) == ("calculator", "succeeded")
    assert "42" in str(invocation.result)
    assert last_answer(run) == "it is 42"


def test_an_empty_workspace_is_deleted_with_its_built_in_tools_and_one_in_use_is_kept(admin_client, places):
    _a, b, _owner_a, _owner_b = places
    empty = Workspace.objects.create(name="Empty", slug="empty")
    page = admin_client.get(f"/admin/workspaces/workspace/{empty.pk}/delete/")
    assert page.status_code == 200 and not page.context["protected"]
    assert admin_client.post(f"/admin/workspaces/workspace/{empty.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Workspace.objects.filter(pk=empty.pk).exists()
    assert not ToolDefinition.objects.filter(workspace_id=empty.pk).exists()

    # A workspace with an agent stays, with every tool it had.
    make_agent(workspace=b, model_config=ModelConfigFactory(workspace=b), tools=["calculator"])
    page = admin_client.get(f"/admin/workspaces/workspace/{b.pk}/delete/")
    assert page.context["protected"]
    with pytest.raises(ProtectedError):
        b.delete()
    assert ToolDefinition.objects.filter(workspace=b, kind="python").count() == len(registry.names())
