"""Tools a model cannot turn against the operator: path arguments stay in their segment,
header values stay on their line, switched-off tools stop at once, a secret goes only to the
origin it was set for, refusals tell the model nothing about the internal network, and a new
HTTP write tool asks for approval."""

import json
import socket

import pytest

from agents.models import AgentTool
from agents.snapshot import snapshot_build
from conversations.models import Approval, ToolInvocation
from engine.approvals import approval_decide
from engine.loop import run_advance
from tests.approvals.conftest import approver, enqueued, scenario  # noqa: F401 (fixtures)
from tests.support.factories import make_agent
from tests.support.servers import petstore  # noqa: F401 (fixture
from tools.approval_policy import approval_need
from tools.executors import execute_tool
from tools.models import ToolDefinition
from tools.registry import ToolContext

CTX = ToolContext(run_id="run", tool_call_id="call_1", idempotency_key="run:call_1")
PET_ID = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
PET = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def http_tool(name: str, **fields) -> ToolDefinition:
    tool = ToolDefinition(name=name, description=f"{name} (test)", kind="http", **fields)
    tool.full_clean()
    tool.save()
    return tool


def spec_of(tool: ToolDefinition) -> dict:
    agent = make_agent()
    AgentTool.objects.create(agent=agent, tool=tool, approval=AgentTool.Approval.NEVER)
    return next(s for s in snapshot_build(agent=agent)["tools"] if s["name"] == tool.name)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value", ["..", ".", "%2e%2e", "%2E%2e", "..%2f", "a%2Fb", "a/b", "a\\b", "%5c", "%252e%252e", "..%252f", ""]
)
def test_path_arguments_cannot_leave_their_segment(petstore, value):
    tool = http_tool("pets-get", parameters=PET_ID, http_method="GET", http_url=f"{petstore.base_url}/pets/{{id}}")
    before = len(petstore.requests)
    outcome = execute_tool(spec=spec_of(tool), arguments={"id": value}, ctx=CTX)
    assert outcome.status == "error"
    assert "the argument 'id' is part of the URL path" in outcome.content
    assert "without '/'" in outcome.content  # says what to send instead
    assert petstore.requests[before:] == []


@pytest.mark.django_db
def test_plain_path_arguments_still_work(petstore):
    tool = http_tool("pets-get", parameters=PET_ID, http_method="GET", http_url=f"{petstore.base_url}/pets/{{id}}")
    outcome = execute_tool(spec=spec_of(tool), arguments={"id": "2"}, ctx=CTX)
    assert outcome.status == "succeeded" and json.loads(outcome.content)["name"] == "Tom"


@pytest.mark.django_db
def test_a_header_value_from_the_model_cannot_add_a_header(petstore):
    tool = http_tool("pets-add", parameters=PET, http_method="POST", http_url=f"{petstore.base_url}/pets")
    # The idempotency key carries the tool call id, which the model chose.
    ctx = ToolContext(run_id="run", tool_call_id="call_1\r\nX-Admin: yes", idempotency_key="run:call_1\r\nX-Admin: yes")
    before = len(petstore.requests)
    outcome = execute_tool(spec=spec_of(tool), arguments={"name": "Bella"}, ctx=ctx)
    assert outcome.status == "error"
    assert "Idempotency-Key header would contain a line break" in outcome.content
    assert petstore.requests[before:] == []


@pytest.mark.django_db
def test_a_new_http_tool_that_is_not_a_get_is_a_write_that_asks(petstore, admin_client):
    post = http_tool("pets-add", parameters=PET, http_method="POST", http_url=f"{petstore.base_url}/pets")
    get = http_tool("pets-get", parameters=PET_ID, http_method="GET", http_url=f"{petstore.base_url}/pets/{{id}}")
    assert post.side_effect == "write" and get.side_effect == "read"
    agent = make_agent()
    AgentTool.objects.create(agent=agent, tool=post)
    [spec] = snapshot_build(agent=agent)["tools"]
    assert approval_need(spec=spec, arguments={"name": "Bella"}).required
    # An operator who knows it only reads can say so afterwards.
    post.side_effect = "read"
    post.full_clean()
    post.save()
    assert ToolDefinition.objects.get(pk=post.pk).side_effect == "read"
    page = admin_client.get("/admin/tools/tooldefinition/").content.decode()
    assert "Effective approval" in page and "always asks" in page and "never asks" in page


@pytest.mark.django_db
def test_a_switched_off_tool_stops_in_runs_pinned_before(petstore):
    tool = http_tool("pets-get", parameters=PET_ID, http_method="GET", http_url=f"{petstore.base_url}/pets/{{id}}")
    spec = spec_of(tool)
    ToolDefinition.objects.filter(pk=tool.pk).update(is_active=False)
    before = len(petstore.requests)
    outcome = execute_tool(spec=spec, arguments={"id": "1"}, ctx=CTX)
    assert outcome.status == "error"
    assert outcome.content == "Tool pets-get cannot run: it has been switched off by an operator; answer without it."
    assert petstore.requests[before:] == []
    AgentTool.objects.filter(tool=tool).delete()
    ToolDefinition.objects.filter(pk=tool.pk).delete()
    gone = execute_tool(spec=spec, arguments={"id": "1"}, ctx=CTX)
    assert gone.status == "error" and "removed by an operator" in gone.content


@pytest.mark.django_db
def test_a_switched_off_python_tool_stops_too():
    agent = make_agent(tools=["test-echo"])
    [spec] = snapshot_build(agent=agent)["tools"]
    ToolDefinition.objects.filter(name="test-echo").update(is_active=False)
    outcome = execute_tool(spec=spec, arguments={"text": "hi"}, ctx=CTX)
    assert outcome.status == "error" and "switched off by an operator" in outcome.content


@pytest.mark.django_db
def test_an_approved_call_does_not_run_after_its_tool_was_switched_off(scenario, enqueued, executions, approver):
    s = scenario(
        steps=[
            {"tool_calls": [{"name": "test-counter", "arguments": {"label": "off"}}]},
            {"content": "Result: {last_tool_result}"},
        ]
    )
    run = s.post()
    run_advance(run_id=run.pk)
    approval = Approval.objects.get(run=run)
    ToolDefinition.objects.filter(name="test-counter").update(is_active=False)
    approval_decide(approval_id=approval.pk, user=approver, decision="approve", channel="api")
    run_advance(run_id=run.pk)
    run.refresh_from_db()

    assert executions("off") == 0
    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.status == "error" and "switched off by an operator" in invocation.result
    assert run.status == "completed"


@pytest.mark.django_db
def test_a_secret_is_not_sent_to_the_old_url_after_a_move(petstore, settings):
    port = petstore.base_url.rsplit(":", 1)[1]
    settings.AGENTRY_OUTBOUND_ALLOWLIST = ["127.0.0.1", f"localhost:{port}"]
    tool = http_tool(
        "pets-add",
        parameters=PET,
        http_method="POST",
        http_url=f"{petstore.base_url}/pets",
        http_secret_headers=json.dumps({"X-Api-Key": "old-key"}),
    )
    pinned = spec_of(tool)
    # The operator moves the tool to another host, with that host's key.
    tool.http_url = f"http://localhost:{port}/pets"
    tool.http_secret_headers = json.dumps({"X-Api-Key": "new-key"})
    tool.save()
    before = len(petstore.requests)
    outcome = execute_tool(spec=pinned, arguments={"name": "Bella"}, ctx=CTX)
    assert outcome.status == "error" and "moved it to another address" in outcome.content
    assert petstore.requests[before:] == []
    assert "localhost" not in outcome.content  # the model is not told where it went
    # A run pinned to the new address sends the new key there.
    fresh = execute_tool(spec=spec_of(tool), arguments={"name": "Bella"}, ctx=CTX)
    assert fresh.status == "succeeded"
    assert petstore.requests[-1]["headers"]["x-api-key"] == "new-key"


@pytest.mark.django_db
def test_refusals_do_not_tell_the_model_what_a_host_resolved_to(settings, monkeypatch):
    settings.AGENTRY_OUTBOUND_ALLOWLIST = []
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        if host == "inventory.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.20.30.40", 80))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    tool = http_tool(
        "inventory",
        parameters={"type": "object", "properties": {}},
        http_method="GET",
        http_url="http://inventory.example/items",
    )
    outcome = execute_tool(spec=spec_of(tool), arguments={}, ctx=CTX)
    assert outcome.status == "error"
    assert outcome.content == (
        "Tool inventory failed: Cannot connect to inventory.example: the host is not allowed or could not be found."
    )
    # The operator still reads the address and the reason on the ledger.
    assert "10.20.30.40" in outcome.error and "private" in outcome.error
    # An unknown name reads the same, so the model cannot tell internal names from missing ones.
    unknown = http_tool(
        "nowhere",
        parameters={"type": "object", "properties": {}},
        http_method="GET",
        http_url="http://no-such-host.invalid/items",
    )
    missing = execute_tool(spec=spec_of(unknown), arguments={}, ctx=CTX)
    assert missing.content.endswith("the host is not allowed or could not be found.")
