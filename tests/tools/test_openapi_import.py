"""OpenAPI 3 import: one HTTP tool per operation, with its parameters as JSON Schema."""

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents.models import AgentTool
from agents.snapshot import snapshot_build
from tests.support.factories import make_agent
from tests.support.servers import petstore  # noqa: F401 (fixture
from tools.executors import execute_tool
from tools.models import ToolDefinition
from tools.openapi import OpenAPIError
from tools.registry import ToolContext
from tools.services import tool_definitions_import_openapi

FIXTURES = Path(__file__).parents[1] / "fixtures"
NAMES = ["petstore-addPet", "petstore-deletePet", "petstore-findPets", "petstore-find_pet_by_id"]


def _tools() -> dict[str, ToolDefinition]:
    return {t.name: t for t in ToolDefinition.objects.filter(kind="http", name__startswith="petstore-")}


@pytest.mark.django_db
@pytest.mark.parametrize("fixture", ["petstore-expanded.yaml", "petstore-expanded.json"])
def test_each_operation_becomes_an_http_tool(fixture):
    report = tool_definitions_import_openapi(document=(FIXTURES / fixture).read_text(), prefix="petstore")
    assert sorted(report.created) == NAMES and not report.skipped
    tools = _tools()

    find = tools["petstore-findPets"]
    assert (find.http_method, find.http_url) == ("GET", "https://petstore.swagger.io/v2/pets")
    assert find.http_query_params == ["tags", "limit"]
    assert find.parameters["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "tags to filter by",
    }
    assert "required" not in find.parameters
    assert (find.side_effect, find.approval_policy) == ("read", "auto")

    add = tools["petstore-addPet"]
    assert add.http_body_argument == "body" and add.parameters["required"] == ["body"]
    assert add.parameters["properties"]["body"]["required"] == ["name"]  # $ref to NewPet, inlined
    assert (add.side_effect, add.approval_policy, add.idempotent) == ("write", "always", False)

    by_id = tools["petstore-find_pet_by_id"]  # operationId "find pet by id", made a valid name
    assert by_id.http_url == "https://petstore.swagger.io/v2/pets/{id}" and by_id.parameters["required"] == ["id"]
    assert (tools["petstore-deletePet"].http_method, tools["petstore-deletePet"].side_effect) == ("DELETE", "write")


@pytest.mark.django_db
def test_importing_again_updates_and_keeps_operator_choices():
    document = (FIXTURES / "petstore-expanded.yaml").read_text()
    tool_definitions_import_openapi(document=document, prefix="petstore")
    ToolDefinition.objects.filter(name="petstore-addPet").update(approval_policy="never")
    report = tool_definitions_import_openapi(
        document=document, prefix="petstore", base_url="https://pets.example.com/api/"
    )
    assert sorted(report.updated) == NAMES and not report.created
    assert _tools()["petstore-addPet"].http_url == "https://pets.example.com/api/pets"
    assert _tools()["petstore-addPet"].approval_policy == "never"
    assert ToolDefinition.objects.filter(name__startswith="petstore-").count() == 4


@pytest.mark.django_db
@pytest.mark.parametrize(
    "document,message",
    [
        ('{"swagger": "2.0", "paths": {"/a": {}}}', "Only OpenAPI 3 documents can be imported (found swagger 2.0)"),
        ("openapi: 3.0.0\npaths: [unclosed", "neither valid JSON nor valid YAML"),
        ('{"openapi": "3.0.0", "paths": {}}', "no paths"),
        ('{"openapi": "3.1.0", "servers": [{"url": "/v1"}], "paths": {"/a": {"get": {}}}}', "enter the API's base URL"),
        (
            '{"openapi": "3.1.0", "servers": [{"url": "https://x.example"}], "paths": {"/a": {"get": {"parameters": '
            '[{"$ref": "#/components/parameters/Nope"}]}}}}',
            "points to nothing",
        ),
    ],
)
def test_bad_documents_are_refused_with_a_reason(document, message):
    with pytest.raises(OpenAPIError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tool_definitions_import_openapi(document=document)
    assert not ToolDefinition.objects.filter(kind="http").exists()


@pytest.mark.django_db
def test_imported_tools_call_the_service(petstore):
    tool_definitions_import_openapi(
        document=(FIXTURES / "petstore-expanded.json").read_text(), prefix="petstore", base_url=petstore.base_url
    )
    agent = make_agent()
    for tool in _tools().values():
        AgentTool.objects.create(agent=agent, tool=tool)
    specs = {s["name"]: s for s in snapshot_build(agent=agent)["tools"]}
    ctx = ToolContext(run_id="r", tool_call_id="c", idempotency_key="r:c")

    found = execute_tool(spec=specs["petstore-findPets"], arguments={"tags": ["dog"], "limit": 5}, ctx=ctx)
    assert json.loads(found.content) == [{"id": 1, "name": "Rex", "tag": "dog"}]
    assert petstore.requests[-1]["query"] == {"tags": "dog", "limit": "5"}
    added = execute_tool(spec=specs["petstore-addPet"], arguments={"body": {"name": "Kiki", "tag": "bird"}}, ctx=ctx)
    pet_id = json.loads(added.content)["id"]
    assert json.loads(petstore.requests[-1]["body"]) == {"name": "Kiki", "tag": "bird"}
    assert petstore.requests[-1]["headers"]["idempotency-key"] == "r:c"
    got = execute_tool(spec=specs["petstore-find_pet_by_id"], arguments={"id": pet_id}, ctx=ctx)
    assert json.loads(got.content)["name"] == "Kiki"


@pytest.mark.django_db
def test_admin_import_page_accepts_an_upload_and_a_paste(admin_client):
    upload = SimpleUploadedFile("petstore.yaml", (FIXTURES / "petstore-expanded.yaml").read_bytes())
    response = admin_client.post(
        "/admin/tools/tooldefinition/import-openapi/", {"upload": upload, "prefix": "petstore"}
    )
    assert response.status_code == 302
    assert sorted(_tools()) == NAMES
    page = admin_client.get(response.url).content.decode()
    assert "OpenAPI import: 4 created, 0 updated." in page

    pasted = admin_client.post(
        "/admin/tools/tooldefinition/import-openapi/", {"document": '{"swagger": "2.0"}', "prefix": "x"}
    )
    assert pasted.status_code == 200 and "Only OpenAPI 3 documents can be imported" in pasted.content.decode()
