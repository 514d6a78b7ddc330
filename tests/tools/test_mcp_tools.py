"""MCP servers: the real mcp-server-time over stdio and an MCP SDK server over streamable HTTP."""

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from agents.models import AgentTool
from agents.snapshot import snapshot_build
from conversations.models import Run, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.servers import notes_mcp  # noqa: F401 (fixture
from tests.support.waits import wait_for
from tools.executors import execute_tool
from tools.mcp_sessions import MCPUnavailable
from tools.models import MCPServer, ToolDefinition
from tools.registry import ToolContext
from tools.services import mcp_server_discover, prefixed_tool_name

TIME_ARGS = ["-m", "mcp_server_time", "--local-timezone", "UTC"]


def time_server(*, trusted: bool = True, name: str = "time") -> MCPServer:
    return MCPServer.objects.create(
        name=name, transport="stdio", command=sys.executable, args=TIME_ARGS, trusted=trusted
    )


def notes_server(url: str, *, trusted: bool = True) -> MCPServer:
    return MCPServer.objects.create(
        name="notes", transport="streamable_http", url=url, trusted=trusted, headers=json.dumps({"X-Token": "t0ken"})
    )


def children_running(pid: int, needle: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid and needle in cmdline:
            found.append(int(entry.name))
    return found


def specs(*tools: ToolDefinition) -> dict[str, dict]:
    agent = make_agent()
    for tool in tools:
        AgentTool.objects.create(agent=agent, tool=tool)
    return {s["name"]: s for s in snapshot_build(agent=agent)["tools"]}


CTX = ToolContext(run_id="r", tool_call_id="c", idempotency_key="r:c")


@pytest.mark.django_db
def test_stdio_discovery_creates_server_dash_tool_definitions():
    server = time_server(trusted=True)
    report = mcp_server_discover(server=server)

    assert sorted(report.created) == ["time-convert_time", "time-get_current_time"]
    tool = ToolDefinition.objects.get(name="time-get_current_time")
    assert (tool.kind, tool.mcp_server, tool.mcp_tool_name) == ("mcp", server, "get_current_time")
    assert tool.parameters["required"] == ["timezone"] and "timezone" in tool.parameters["properties"]
    # A trusted server's readOnlyHint/idempotentHint make the tool a read that needs no approval.
    assert (tool.side_effect, tool.approval_policy, tool.idempotent) == ("read", "auto", True)
    server.refresh_from_db()
    assert server.discovered_at is not None and server.last_error == ""


@pytest.mark.django_db
def test_an_untrusted_servers_tools_are_writes_that_need_approval():
    mcp_server_discover(server=time_server(trusted=False))
    for tool in ToolDefinition.objects.filter(mcp_server__name="time"):
        assert (tool.side_effect, tool.approval_policy, tool.idempotent) == ("write", "always", False)


@pytest.mark.django_db
def test_streamable_http_discovery_reads_annotations_of_a_trusted_server(notes_mcp):
    server = notes_server(notes_mcp.url)
    ToolDefinition.objects.create(
        name="notes-old", description="gone", kind="mcp", mcp_server=server, mcp_tool_name="old"
    )
    report = mcp_server_discover(server=server)

    assert sorted(report.created) == ["notes-add_note", "notes-fail", "notes-list_notes"]
    assert report.deactivated == ["notes-old"]
    tools = {t.name: t for t in ToolDefinition.objects.filter(mcp_server=server)}
    assert (tools["notes-list_notes"].side_effect, tools["notes-list_notes"].approval_policy) == ("read", "auto")
    assert (tools["notes-add_note"].side_effect, tools["notes-add_note"].approval_policy) == ("write", "never")
    # No annotations: the spec's defaults (not read-only, destructive).
    assert (tools["notes-fail"].side_effect, tools["notes-fail"].approval_policy) == ("write", "always")
    assert tools["notes-old"].is_active is False

    ToolDefinition.objects.filter(name="notes-add_note").update(approval_policy="always")
    again = mcp_server_discover(server=server)
    assert sorted(again.updated) == ["notes-add_note", "notes-fail", "notes-list_notes"]
    assert ToolDefinition.objects.get(name="notes-add_note").approval_policy == "always"  # the operator's choice stays


def test_names_follow_the_providers_rule():
    assert prefixed_tool_name("time", "get_current_time") == "time-get_current_time"
    assert prefixed_tool_name("srv", "a.b/c d") == "srv-a_b_c_d"
    long_a, long_b = prefixed_tool_name("server", "x" * 80 + "a"), prefixed_tool_name("server", "x" * 80 + "b")
    assert len(long_a) == len(long_b) == 64 and long_a != long_b and long_a.startswith("server-xxx")


@pytest.mark.django_db
def test_unreachable_servers_are_reported(settings, notes_mcp):
    missing = MCPServer.objects.create(
        name="missing", transport="stdio", command="/nonexistent/mcp-server", connect_timeout_seconds=5
    )
    with pytest.raises(MCPUnavailable, match="missing could not be started or reached"):
        mcp_server_discover(server=missing)
    missing.refresh_from_db()
    assert "could not be started" in missing.last_error

    settings.AGENTRY_OUTBOUND_ALLOWLIST = []
    with pytest.raises(MCPUnavailable, match="Cannot connect to 127.0.0.1: the host is not allowed"):
        mcp_server_discover(server=notes_server(notes_mcp.url))


@pytest.mark.django_db
def test_calls_reuse_one_stdio_process_and_replace_a_dead_one():
    server = time_server(name="time_pool")
    mcp_server_discover(server=server)
    tools = specs(*ToolDefinition.objects.filter(mcp_server=server))
    spec = tools["time_pool-get_current_time"]

    for zone in ("Asia/Tokyo", "Europe/Paris", "America/New_York"):
        outcome = execute_tool(spec=spec, arguments={"timezone": zone}, ctx=CTX)
        assert outcome.status == "succeeded" and json.loads(outcome.content)["timezone"] == zone
    [pid] = children_running(os.getpid(), "mcp_server_time")

    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not children_running(os.getpid(), "mcp_server_time") or None, timeout=10, message="server to die")
    # A read is sent again on a new session; the server is a new process.
    outcome = execute_tool(spec=spec, arguments={"timezone": "Asia/Tokyo"}, ctx=CTX)
    assert outcome.status == "succeeded"
    [new_pid] = children_running(os.getpid(), "mcp_server_time")
    assert new_pid != pid

    # A write whose server died is not sent twice: its outcome is reported as unknown.
    os.kill(new_pid, signal.SIGKILL)
    wait_for(lambda: not children_running(os.getpid(), "mcp_server_time") or None, timeout=10, message="server to die")
    write = {**spec, "side_effect": "write", "idempotent": False}
    outcome = execute_tool(spec=write, arguments={"timezone": "Asia/Tokyo"}, ctx=CTX)
    assert outcome.status == "error" and "its outcome is unknown" in outcome.content


@pytest.mark.django_db
def test_is_error_results_become_friendly_errors(notes_mcp):
    server = notes_server(notes_mcp.url)
    mcp_server_discover(server=server)
    tools = specs(*ToolDefinition.objects.filter(mcp_server=server))
    outcome = execute_tool(spec=tools["notes-fail"], arguments={}, ctx=CTX)
    assert outcome.status == "error" and "the notebook is locked" in outcome.content
    added = execute_tool(spec=tools["notes-add_note"], arguments={"text": "milk"}, ctx=CTX)
    assert added.status == "succeeded" and json.loads(added.content)["saved"] == "milk"


@pytest.mark.django_db
def test_admin_discover_action(admin_client, notes_mcp):
    server = notes_server(notes_mcp.url)
    response = admin_client.post(
        "/admin/tools/mcpserver/", {"action": "discover_tools", "_selected_action": [server.pk]}, follow=True
    )
    assert "Notes: 3 created, 0 updated." in response.content.decode()  # the admin capitalises messages
    page = admin_client.get(f"/admin/tools/mcpserver/{server.pk}/change/").content.decode()
    assert "t0ken" not in page and "X-Token: ••••••••" in page and "notes-add_note" in page


@pytest.mark.e2e
def test_a_run_calls_tools_of_both_servers(worker, fake_llm, notes_mcp):
    time = time_server(trusted=True)
    notes = notes_server(notes_mcp.url, trusted=True)
    mcp_server_discover(server=time)
    mcp_server_discover(server=notes)
    fake_llm.script(
        "mcp-run",
        {
            "scenarios": [
                {
                    "match": "time and note",
                    "steps": [
                        {
                            "tool_calls": [
                                {
                                    "id": "call_time",
                                    "name": "time-get_current_time",
                                    "arguments": {"timezone": "Asia/Tokyo"},
                                },
                                {"id": "call_note", "name": "notes-add_note", "arguments": {"text": "buy milk"}},
                            ]
                        },
                        {"content": "In Tokyo it is {tool@time-get_current_time:datetime}; noted."},
                    ],
                },
                {
                    "match": "bad zone",
                    "steps": [
                        {
                            "tool_calls": [
                                {
                                    "id": "call_bad",
                                    "name": "time-get_current_time",
                                    "arguments": {"timezone": "Mars/Base"},
                                }
                            ]
                        },
                        {"content": "That zone does not exist: {last_tool_result}"},
                    ],
                },
            ]
        },
    )
    agent = make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="mcp-run"))
    for tool in ToolDefinition.objects.filter(name__in=["time-get_current_time", "notes-add_note"]):
        AgentTool.objects.create(agent=agent, tool=tool)
    conversation = conversation_create(agent=agent)

    def finished(run):
        return wait_for(lambda: Run.objects.filter(pk=run.pk, status="completed").first(), message="run to complete")

    run = finished(message_post(conversation=conversation, content="time and note"))
    results = {i.tool_call_id: i for i in ToolInvocation.objects.filter(run=run)}
    assert results["call_time"].status == "succeeded"
    assert json.loads(results["call_time"].result)["timezone"] == "Asia/Tokyo"
    assert results["call_note"].status == "succeeded" and '"saved":"buy milk"' in results["call_note"].result
    assert run.messages.order_by("-order").first().content.startswith("In Tokyo it is 20")

    bad = finished(message_post(conversation=conversation, content="bad zone"))
    [invocation] = ToolInvocation.objects.filter(run=bad)
    assert invocation.status == "error" and "Invalid timezone" in invocation.result
    # Three calls of the stdio server in one worker: one server process.
    assert len(children_running(worker.process.pid, "mcp_server_time")) == 1
