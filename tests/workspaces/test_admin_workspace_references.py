"""An object refers only to objects of its own workspace (model clean, so the admin's forms, its
inline rows and every service calling full_clean agree); the admin saves a new object in the
workspace its author acts in; an API token gets its workspace, role and scopes at creation."""

import json

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from agents.models import Agent, AgentDelegate, AgentTool, GuardrailRule, ModelConfig
from alerts.models import AlertRule
from conversations.models import ApiToken
from evals.models import EvalRun, EvalSuite, ReleaseGate
from knowledge.models import KnowledgeBase
from notifications.models import Webhook
from tests.support.admin_forms import agent_admin_inlines
from tests.support.factories import make_user
from tests.workspaces.admin_two_workspaces import MARKER, workspace_seed
from tools.models import ToolDefinition
from tools.services import tool_definitions_import_openapi
from triggers.models import Hook, Schedule
from widgets.models import Widget
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.references import OTHER_WORKSPACE, references_check
from workspaces.roles import Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_workspaces():
    first = Workspace.objects.get(pk=default_workspace_id())
    zulu = Workspace.objects.create(name=f"{MARKER} team", slug=MARKER)
    member, stranger = make_user(staff=True), make_user(staff=True)
    membership_set(user=member, workspace=first, role=Role.OWNER)
    membership_set(user=stranger, workspace=zulu, role=Role.OWNER)
    a = workspace_seed(first, "alpha", token_user=member)
    b = workspace_seed(zulu, MARKER, token_user=stranger)
    return first, member, a, b


def _refused(obj, field):
    with pytest.raises(ValidationError) as refused:
        obj.full_clean()
    assert str(OTHER_WORKSPACE) in refused.value.message_dict.get(field, []), refused.value.message_dict


def test_an_object_may_not_refer_to_another_workspaces_object(two_workspaces):
    first, _member, a, b = two_workspaces
    agent, version_b = a["agent"], b["agent"].versions.first()
    ours, theirs = a["model"], b["model"]
    rule = {"kind": "blocked_terms", "terms": "x"}
    named = {"workspace": first, "name": "x", "slug": "x"}
    cases = [
        (Agent(**named, model_config=theirs), "model_config"),
        (Agent(**named, model_config=ours, fallback_model_config=theirs), "fallback_model_config"),
        (Agent(**named, model_config=ours, memory_embedding_model=theirs), "memory_embedding_model"),
        (AgentTool(agent=agent, tool=b["tool"]), "tool"),
        (AgentDelegate(parent=agent, child=b["agent"], tool_name="ask_other"), "child"),
        (GuardrailRule(workspace=first, agent=agent, model_config=theirs, **rule), "model_config"),
        (GuardrailRule(workspace=first, agent=b["agent"], **rule), "agent"),
        (ToolDefinition(workspace=first, name="t-x", description="x", mcp_server=b["server"]), "mcp_server"),
        (KnowledgeBase(workspace=first, name="kb-x", embedding_model=b["model"]), "embedding_model"),
        (Schedule(workspace=first, agent=b["agent"], name="s", message="m"), "agent"),
        (Hook(workspace=first, agent=b["agent"], name="h", secret="s" * 32, message="m"), "agent"),
        (Widget(workspace=first, agent=b["agent"], name="w", secret="s" * 32), "agent"),
        (Webhook(workspace=first, agent=b["agent"], url="https://example.com/h", secret="s" * 32), "agent"),
        (AlertRule(workspace=first, name="r", kind="tokens", threshold=1, agent=b["agent"]), "agent"),
        (AlertRule(workspace=first, name="r", kind="tokens", threshold=1, model_config=b["model"]), "model_config"),
        (EvalSuite(workspace=first, name="s-x", judge_model_config=b["model"]), "judge_model_config"),
        (ReleaseGate(agent=agent, suite=b["suite"]), "suite"),
        (EvalRun(suite=a["suite"], agent_version=version_b), "agent_version"),
    ]  # fmt: skip
    for obj, field in cases:
        _refused(obj, field)
    # Saved without a workspace, an object joins the first one: it is checked against it.
    _refused(Schedule(agent=b["agent"], name="s", message="m"), "agent")


def test_the_same_workspaces_objects_pass(two_workspaces):
    first, _member, a, _b = two_workspaces
    for obj in (
        Agent(workspace=first, name="x", slug="x", model_config=a["model"], fallback_model_config=a["model"]),
        AgentTool(agent=a["agent"], tool=a["tool"]),
        ReleaseGate(agent=a["agent"], suite=a["suite"]),
        Schedule(agent=a["agent"], name="s", message="m"),
    ):
        references_check(obj)


def _agent_post(model_config, **fields) -> dict:
    return {
        "name": "Router",
        "slug": "router",
        "system_prompt": "",
        "time_zone": "UTC",
        "language": "en",
        "model_config": model_config.pk,
        "max_iterations": 8,
        "max_same_tool_streak": 3,
        "tool_choice": "auto",
        "tool_choice_name": "",
        "parallel_tool_calls": "on",
        "is_active": "on",
        **agent_admin_inlines(),
        **fields,
    }


def test_a_member_saves_into_their_workspace_and_cannot_pick_another_workspaces_objects(client, two_workspaces):
    first, member, a, b = two_workspaces
    client.force_login(member)

    page = client.get("/admin/agents/agent/add/")
    assert 'name="workspace"' not in page.content.decode()

    # A posted workspace is not a field of theirs: the agent is saved in the one they act in.
    saved = client.post("/admin/agents/agent/add/", _agent_post(a["model"], workspace=b["agent"].workspace_id))
    assert saved.status_code == 302
    assert Agent.objects.get(slug="router").workspace == first

    for refused in (
        _agent_post(b["model"], slug="router-2"),
        _agent_post(
            a["model"],
            slug="router-3",
            **agent_admin_inlines(agent_tools=1),
            **{"agent_tools-0-tool": b["tool"].pk, "agent_tools-0-approval": "inherit", "agent_tools-0-enabled": "on"},
        ),
        _agent_post(
            a["model"],
            slug="router-4",
            **agent_admin_inlines(delegates=1),
            **{"delegates-0-tool_name": "ask", "delegates-0-child": b["agent"].pk, "delegates-0-enabled": "on"},
        ),
    ):
        page = client.post("/admin/agents/agent/add/", refused)
        assert page.status_code == 200
        assert "Select a valid choice" in page.content.decode()
    assert not Agent.objects.filter(slug__in=["router-2", "router-3", "router-4"]).exists()


def test_a_superuser_installation_wide_chooses_the_workspace_and_its_references_must_match(
    admin_client, two_workspaces
):
    first, _member, a, b = two_workspaces
    zulu = b["agent"].workspace

    page = admin_client.get("/admin/agents/agent/add/")
    assert 'name="workspace"' in page.content.decode()

    refused = admin_client.post("/admin/agents/agent/add/", _agent_post(b["model"], workspace=first.pk))
    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors["model_config"] == [str(OTHER_WORKSPACE)]
    assert not Agent.objects.filter(slug="router").exists()

    saved = admin_client.post("/admin/agents/agent/add/", _agent_post(b["model"], workspace=zulu.pk))
    assert saved.status_code == 302
    assert Agent.objects.get(slug="router").workspace == zulu

    # Left empty, the workspace is the installation's first (as before workspaces).
    data = {"name": "m-new", "provider": "openai_compatible", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    data |= {"stop": "[]", "response_format": "text", "extra_params": "{}", "response_schema": "null"}
    data |= {"connect_timeout_seconds": 10, "read_timeout_seconds": 120, "max_retries": 2}
    data |= {"price_input_per_million": 0, "price_output_per_million": 0, "price_cached_input_per_million": 0}
    assert admin_client.post("/admin/agents/modelconfig/add/", data).status_code == 302
    assert ModelConfig.objects.get(name="m-new").workspace == first


def test_a_guardrail_row_joins_its_agents_workspace(admin_client, two_workspaces):
    _first, _member, _a, b = two_workspaces
    zulu = b["agent"].workspace
    rule = {
        **agent_admin_inlines(guardrail_rules=1),
        "guardrail_rules-0-side": "both",
        "guardrail_rules-0-kind": "blocked_terms",
        "guardrail_rules-0-action": "block",
        "guardrail_rules-0-enabled": "on",
        "guardrail_rules-0-terms": "secret",
    }
    saved = admin_client.post("/admin/agents/agent/add/", _agent_post(b["model"], workspace=zulu.pk, **rule))
    assert saved.status_code == 302
    assert GuardrailRule.objects.get(agent__slug="router").workspace == zulu


def test_an_api_token_gets_its_workspace_role_and_scopes_at_creation(client, two_workspaces):
    first, member, _a, _b = two_workspaces
    client.force_login(member)

    created = client.post(
        "/admin/conversations/apitoken/add/", {"name": "ci", "role": "viewer", "scopes": ["runs", "admin-read"]}
    )
    assert created.status_code == 302
    token = ApiToken.objects.get(name="ci")
    assert (token.workspace, token.user, token.role, token.scopes) == (first, member, "viewer", ["runs", "admin-read"])

    for bad in ({"name": "x", "scopes": ["everything"]}, {"name": "x", "role": "custom"}):
        page = client.post("/admin/conversations/apitoken/add/", bad)
        assert page.status_code == 200
        assert "Select a valid choice" in page.content.decode()
    assert not ApiToken.objects.filter(name="x").exists()

    # Afterwards its workspace, role and scopes are shown, never changed.
    client.post(
        f"/admin/conversations/apitoken/{token.pk}/change/",
        {"name": "ci", "role": "owner", "scopes": [], "is_active": "on"},
    )
    token.refresh_from_db()
    assert (token.role, token.scopes) == ("viewer", ["runs", "admin-read"])


def test_an_openapi_import_never_changes_another_workspaces_tool(two_workspaces):
    first, _member, _a, b = two_workspaces
    theirs = ToolDefinition.objects.create(
        workspace=b["agent"].workspace, name=f"{MARKER}-tool", description="theirs", kind="http"
    )
    document = (
        '{"openapi": "3.0.0", "info": {"title": "t", "version": "1"}, "servers": [{"url": "https://x.example.com"}],'
        ' "paths": {"/p": {"get": {"operationId": "tool", "responses": {"200": {"description": "ok"}}}}}}'
    )
    # Names are the workspace's (workspaces.names): the import makes the first workspace's own.
    report = tool_definitions_import_openapi(document=document, prefix=MARKER, workspace_id=first.pk)
    assert report.created == [f"{MARKER}-tool"] and not report.updated and not report.skipped
    theirs.refresh_from_db()
    assert (theirs.description, theirs.workspace) == ("theirs", b["agent"].workspace)
    assert ToolDefinition.objects.get(workspace=first, name=f"{MARKER}-tool").http_url == "https://x.example.com/p"

    report = tool_definitions_import_openapi(document=document, prefix="ours", workspace_id=first.pk)
    assert ToolDefinition.objects.get(name="ours-tool").workspace == first


def test_importing_eval_cases_never_writes_into_another_workspaces_suite(client, two_workspaces):
    first, member, _a, b = two_workspaces
    client.force_login(member)
    line = json.dumps({"name": "case-new", "turns": [{"role": "user", "content": "hi"}]})
    url = reverse("admin:evals_evalsuite_import")

    # Their suite's name is a new suite of this workspace (names are the workspace's).
    page = client.post(url, {"suite": b["suite"].name, "file": SimpleUploadedFile("c.jsonl", line.encode())})
    assert page.status_code == 302
    assert not b["suite"].cases.filter(name="case-new").exists()
    assert EvalSuite.objects.get(workspace=first, name=b["suite"].name).cases.get().name == "case-new"

    assert client.post(url, {"suite": "ours", "file": SimpleUploadedFile("c.jsonl", line.encode())}).status_code == 302
    assert EvalSuite.objects.get(name="ours").workspace == first


def test_a_superuser_sees_an_objects_workspace_but_does_not_move_it(admin_client, two_workspaces):
    first, _member, a, _b = two_workspaces
    page = admin_client.get(f"/admin/agents/agent/{a['agent'].pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    assert "workspace" not in form.fields
    assert "workspace" in page.context["adminform"].readonly_fields
