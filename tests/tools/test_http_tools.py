"""HTTP tools defined in the admin, called against a local service."""

import json

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from agents.models import AgentTool
from agents.snapshot import snapshot_build
from conversations.models import ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.servers import petstore  # noqa: F401 (fixture
from tests.support.waits import wait_for
from tools.executors import execute_tool
from tools.models import ToolDefinition
from tools.registry import ToolContext

CTX = ToolContext(run_id="run", tool_call_id="call_1", idempotency_key="run:call_1")
PET = {"type": "object", "properties": {"name": {"type": "string"}, "tag": {"type": "string"}}, "required": ["name"]}
PET_ID = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}


def http_tool(name: str, **fields) -> ToolDefinition:
    tool = ToolDefinition(name=name, description=f"{name} (test)", kind="http", **fields)
    tool.full_clean()
    tool.save()
    return tool


def spec_of(tool: ToolDefinition, **agent_fields) -> dict:
    agent = make_agent(**agent_fields)
    AgentTool.objects.create(agent=agent, tool=tool)
    return next(s for s in snapshot_build(agent=agent)["tools"] if s["name"] == tool.name)


@pytest.mark.django_db
def test_write_tool_sends_body_secret_header_and_idempotency_key(petstore):
    tool = http_tool(
        "pets-add",
        parameters=PET,
        http_method="POST",
        http_url=f"{petstore.base_url}/pets",
        http_headers={"X-Client": "agentry"},
        http_secret_headers=json.dumps({"X-Api-Key": "s3cret"}),
        side_effect="write",
    )
    spec = spec_of(tool)
    before = len(petstore.requests)
    outcome = execute_tool(spec=spec, arguments={"name": "Bella", "tag": "dog"}, ctx=CTX)

    assert outcome.status == "succeeded"
    assert json.loads(outcome.content)["name"] == "Bella"
    [sent] = petstore.requests[before:]
    assert sent["method"] == "POST" and json.loads(sent["body"]) == {"name": "Bella", "tag": "dog"}
    assert sent["headers"]["idempotency-key"] == "run:call_1"
    assert sent["headers"]["x-api-key"] == "s3cret" and sent["headers"]["x-client"] == "agentry"
    # The credential is in neither the run's snapshot nor the database in clear.
    assert "s3cret" not in json.dumps(spec)
    with connection.cursor() as cursor:
        cursor.execute("SELECT http_secret_headers FROM tools_tooldefinition WHERE id = %s", [tool.pk])
        assert "s3cret" not in cursor.fetchone()[0]


@pytest.mark.django_db
def test_read_tool_fills_path_and_query_and_sends_no_idempotency_key(petstore):
    tool = http_tool("pets-get", parameters=PET_ID, http_method="GET", http_url=f"{petstore.base_url}/pets/{{id}}")
    before = len(petstore.requests)
    outcome = execute_tool(spec=spec_of(tool), arguments={"id": 2}, ctx=CTX)
    assert outcome.status == "succeeded" and json.loads(outcome.content) == {"id": 2, "name": "Tom", "tag": "cat"}
    [sent] = petstore.requests[before:]
    assert sent["path"] == "/pets/2" and "idempotency-key" not in sent["headers"]


@pytest.mark.django_db
def test_response_pointer_keeps_a_part_and_long_lists_are_trimmed_by_rows(petstore):
    tool = http_tool(
        "pets-many",
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
        http_method="GET",
        http_url=f"{petstore.base_url}/many",
        http_query_params=["n"],
        http_response_pointer="/data/items",
        max_result_chars=400,
    )
    outcome = execute_tool(spec=spec_of(tool), arguments={"n": 50}, ctx=CTX)
    assert outcome.status == "succeeded" and outcome.truncated
    head, note = outcome.content.rsplit("\n", 1)
    rows = json.loads(head)
    assert rows[0] == {"id": 0, "name": "pet number 0"}
    assert note == f"… {50 - len(rows)} more rows (showing {len(rows)} of 50)"
    assert petstore.requests[-1]["query"] == {"n": "50"}


@pytest.mark.django_db
def test_service_errors_and_empty_answers_read_well(petstore):
    get = http_tool("pets-get", parameters=PET_ID, http_method="GET", http_url=f"{petstore.base_url}/pets/{{id}}")
    missing = execute_tool(spec=spec_of(get), arguments={"id": 999}, ctx=CTX)
    assert missing.status == "error"
    assert (
        missing.content
        == 'Tool pets-get failed: the service answered HTTP 404 Not Found: {"code":404,"message":"pet 999 not found"}'
    )
    delete = http_tool(
        "pets-delete",
        parameters=PET_ID,
        http_method="DELETE",
        http_url=f"{petstore.base_url}/pets/{{id}}",
        side_effect="write",
    )
    petstore.pets[77] = {"id": 77, "name": "Gone"}
    done = execute_tool(spec=spec_of(delete), arguments={"id": 77}, ctx=CTX)
    assert done.status == "succeeded" and done.content == "HTTP 204 No Content (no content)."


@pytest.mark.django_db
def test_an_http_tool_cannot_reach_internal_addresses(settings):
    settings.AGENTRY_OUTBOUND_ALLOWLIST = []
    tool = http_tool(
        "metadata",
        parameters={"type": "object", "properties": {}},
        http_method="GET",
        http_url="http://169.254.169.254/latest/meta-data/",
    )
    outcome = execute_tool(spec=spec_of(tool), arguments={}, ctx=CTX)
    assert outcome.status == "error" and "Cannot connect to 169.254.169.254: the host is not allowed" in outcome.content
    assert "link-local" in outcome.error


@pytest.mark.django_db
def test_definitions_are_checked_when_saved():
    with pytest.raises(ValidationError) as invalid:
        http_tool(
            "bad",
            parameters={"type": "object", "properties": {"id": {"type": "integer"}}},
            http_method="GET",
            http_url="http://example.com/pets/{id}",
            http_query_params=["limit"],
        )
    assert "Path placeholders must be required arguments: id." in str(invalid.value)
    assert "http_query_params" in invalid.value.message_dict
    with pytest.raises(ValidationError) as no_url:
        http_tool("bad2", parameters={"type": "object", "properties": {}}, http_method="GET", http_url="/relative")
    assert "absolute http(s) URL" in str(no_url.value)


@pytest.mark.django_db
def test_admin_stores_secret_headers_encrypted_and_shows_them_masked(admin_client, petstore):
    response = admin_client.post(
        "/admin/tools/tooldefinition/add/",
        {
            "name": "pets-add",
            "description": "Adds a pet.",
            "kind": "http",
            "parameters": json.dumps(PET),
            "side_effect": "write",
            "timeout_seconds": "10",
            "max_result_chars": "4000",
            "is_active": "on",
            "http_method": "POST",
            "http_url": f"{petstore.base_url}/pets",
            "http_query_params": "[]",
            "http_headers": "{}",
            "http_max_response_bytes": "100000",
            "new_http_secret_headers": '{"Authorization": "Bearer abcdefghijkl1234"}',
            "approval_policy": "auto",
            "approval_timeout_seconds": "86400",
            "approval_on_expiry": "continue",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    tool = ToolDefinition.objects.get(name="pets-add")
    assert json.loads(tool.http_secret_headers) == {"Authorization": "Bearer abcdefghijkl1234"}
    page = admin_client.get(f"/admin/tools/tooldefinition/{tool.pk}/change/").content.decode()
    assert "abcdefghijkl1234" not in page and "Authorization: ••••••••1234" in page


@pytest.mark.e2e
def test_a_run_calls_an_http_write_tool_with_its_idempotency_key(worker, fake_llm, petstore):
    tool = http_tool(
        "pets-add",
        parameters=PET,
        http_method="POST",
        http_url=f"{petstore.base_url}/pets",
        side_effect="write",
        approval_policy="always",
    )
    fake_llm.script(
        "http-write",
        {
            "scenarios": [
                {
                    "match": "add",
                    "steps": [
                        {
                            "tool_calls": [
                                {"id": "call_add", "name": "pets-add", "arguments": {"name": "Luna", "tag": "cat"}}
                            ]
                        },
                        {"content": "Added {tool:name} as number {tool:id}."},
                    ],
                }
            ]
        },
    )
    agent = make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="http-write"))
    AgentTool.objects.create(agent=agent, tool=tool, approval=AgentTool.Approval.NEVER)
    before = len(petstore.requests)
    run = message_post(conversation=conversation_create(agent=agent), content="add Luna")
    run = wait_for(lambda: type(run).objects.filter(pk=run.pk, status="completed").first(), message="run to complete")

    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.status == "succeeded" and '"name":"Luna"' in invocation.result
    [sent] = petstore.requests[before:]
    assert sent["headers"]["idempotency-key"] == f"{run.pk}:call_add" == invocation.idempotency_key
    assert run.messages.order_by("-order").first().content.startswith("Added Luna as number ")
