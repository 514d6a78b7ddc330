"""/mcp/ with the official MCP client against a live server and worker: the agents a token may
use as tools, a call as a run through the queue, an approval decided while the call waits."""

import asyncio
import json

import httpx
import httpx2
import mcp_types as types
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from mcp import MCPError
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conversations.models import Approval, LLMCall, Run
from conversations.tokens import api_token_create
from engine.approvals import approval_decide
from tests.platform.test_body_limit import _post as body_post
from tests.support.api_server import ApiServer
from tests.support.factories import ModelConfigFactory, make_agent, make_user, token_for
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.e2e

SCRIPT = {
    "scenarios": [
        {
            "match": "echo (?P<word>\\w+)",
            "steps": [
                {
                    "tool_calls": [{"name": "test-echo", "arguments": {"text": "{word}"}}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": 6},
                },
                {"content": "You said {last_tool_result}.", "usage": {"prompt_tokens": 60, "completion_tokens": 5}},
            ],
        },
        {
            "match": "^record",
            "steps": [
                {"tool_calls": [{"name": "test-counter", "arguments": {"label": "mcp"}}]},
                {"content": "Recorded."},
            ],
        },
    ],
    "fallback": {"content": "answer to {last_user_message}"},
}


@pytest.fixture
def agents(fake_llm):
    config = ModelConfigFactory(base_url=fake_llm.api_base, model=fake_llm.script("mcp", SCRIPT))
    exposed = make_agent(
        tools=["test-echo", "test-counter"],
        approval={"test-counter": "always"},
        slug="mcp-helper",
        name="MCP helper",
        description="Echoes words and records things.",
        model_config=config,
        mcp_exposed=True,
    )
    make_agent(slug="mcp-hidden", model_config=config)
    return exposed


@pytest.fixture
def user():
    return make_user()


def _db(fn, *args, **kwargs):
    """ORM work from the test's event loop: on a thread of its own, its connection closed after."""

    def call():
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return asyncio.to_thread(call)


async def _with_session(base_url: str, token: str, use):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        async with streamable_http_client(f"{base_url}/mcp/", http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                return await use(session)


def _session_run(base_url: str, token: str, use):
    return asyncio.run(_with_session(base_url, token, use))


def test_the_client_lists_the_exposed_agents_and_a_call_is_a_run(api_server, worker, agents, user):
    async def use(session):
        listed = await session.list_tools()
        first = await session.call_tool("mcp-helper", {"message": "echo parrot", "end_user": "eu-1"})
        again = await session.call_tool(
            "mcp-helper", {"message": "hello", "conversation_id": first.structured_content["conversation_id"]}
        )
        return listed, first, again

    listed, first, again = _session_run(api_server.base_url, token_for(user), use)
    assert [(tool.name, tool.description) for tool in listed.tools] == [
        ("mcp-helper", "Echoes words and records things.")
    ]
    assert listed.tools[0].input_schema["required"] == ["message"]
    assert set(listed.tools[0].input_schema["properties"]) == {"message", "conversation_id", "end_user"}
    assert not first.is_error and first.content[0].text == "You said parrot."
    run = Run.objects.get(pk=first.structured_content["run_id"])
    assert (run.trigger, run.status, run.conversation.end_user, run.conversation.owner) == (
        "mcp",
        "completed",
        "eu-1",
        user,
    )
    assert LLMCall.objects.filter(run=run).count() == 2 and run.total_tokens == 111
    assert again.content[0].text == "answer to hello"
    second = Run.objects.get(pk=again.structured_content["run_id"])
    assert second.conversation_id == run.conversation_id and second.trigger == "mcp"
    assert first.structured_content["output_parsed"] is None


def test_an_answer_held_to_a_schema_comes_parsed_in_the_structured_content(api_server, worker, fake_llm, user):
    config = ModelConfigFactory(
        base_url=fake_llm.api_base, model=fake_llm.script("mcp-json", {"fallback": {"content": '{"order": "A-17"}'}})
    )
    schema = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
    make_agent(slug="mcp-json", model_config=config, mcp_exposed=True, output_schema=schema)

    async def use(session):
        return await session.call_tool("mcp-json", {"message": "order?"})

    called = _session_run(api_server.base_url, token_for(user), use)
    assert not called.is_error and called.content[0].text == '{"order": "A-17"}'
    assert called.structured_content["output_parsed"] == {"order": "A-17"}


def test_an_approval_decided_in_the_queue_while_the_call_waits(api_server, worker, agents, user):
    approver = get_user_model().objects.create_superuser("mcp-approver", password="x")
    progress: list[tuple[float, str]] = []

    def decide_pending() -> bool:
        approval = Approval.objects.filter(status="pending", run__trigger="mcp").first()
        if approval is None:
            return False
        approval_decide(approval_id=approval.pk, user=approver, decision="approve", channel="api")
        return True

    async def approve_once_reported():
        # Decided only once the client heard that the call waits: the wait is what is tested.
        while not progress:
            await asyncio.sleep(0.1)
        assert await _db(decide_pending)

    async def use(session):
        async def on_progress(value, total, message):
            progress.append((value, message))

        deciding = asyncio.create_task(approve_once_reported())
        result = await session.call_tool("mcp-helper", {"message": "record this"}, progress_callback=on_progress)
        await deciding
        return result

    result = _session_run(api_server.base_url, token_for(user), use)
    assert not result.is_error and result.content[0].text == "Recorded."
    assert "Waiting for approval of test-counter" in progress[0][1]
    assert result.structured_content["run_id"] in progress[0][1]
    run = Run.objects.get(pk=result.structured_content["run_id"])
    assert run.trigger == "mcp" and run.status == "completed"
    assert Approval.objects.get(run=run).status == "approved"


@pytest.fixture(scope="module")
def impatient_server(api_server_process):
    """A second web process whose MCP calls wait one second."""
    server = ApiServer(
        database_url=api_server_process.database_url, env={"AGENTRY_MCP_CALL_WAIT_SECONDS": "1"}, name="web-mcp"
    ).start()
    yield server
    server.stop()


def test_past_the_wait_a_parked_run_is_named_with_its_conversation(impatient_server, worker, agents, user):
    result = _session_run(
        impatient_server.base_url, token_for(user), lambda s: s.call_tool("mcp-helper", {"message": "record it"})
    )
    assert not result.is_error
    run = Run.objects.get(pk=result.structured_content["run_id"])
    assert run.status == "awaiting_approval" and result.structured_content["status"] == "awaiting_approval"
    assert result.structured_content["conversation_id"] == str(run.conversation_id)
    text = result.content[0].text
    assert text.startswith(f"Waiting for approval, run {run.pk}") and str(run.conversation_id) in text


def test_a_token_of_another_workspace_sees_and_calls_nothing_of_this_one(api_server, agents, user):
    beta = Workspace.objects.create(name="Beta", slug="beta")
    stranger = make_user()
    membership_set(user=stranger, workspace=beta, role=Role.OWNER)
    make_agent(slug="beta-agent", workspace=beta, mcp_exposed=True)
    token = api_token_create(user=stranger, name="beta", workspace=beta)[1]

    async def use(session):
        listed = await session.list_tools()
        with pytest.raises(MCPError) as refused:
            await session.call_tool("mcp-helper", {"message": "echo x"})
        return listed, refused.value

    listed, refused = _session_run(api_server.base_url, token, use)
    assert [tool.name for tool in listed.tools] == ["beta-agent"]
    assert refused.code == types.INVALID_PARAMS and "mcp-helper" in refused.message
    assert not Run.objects.exists()


def test_a_viewer_s_token_lists_the_tools_but_starts_no_run(api_server, agents):
    viewer = make_user()
    membership_set(user=viewer, workspace=Workspace.objects.get(pk=agents.workspace_id), role=Role.VIEWER)

    async def use(session):
        return await session.list_tools(), await session.call_tool("mcp-helper", {"message": "hi"})

    listed, result = _session_run(api_server.base_url, token_for(viewer), use)
    assert [tool.name for tool in listed.tools] == ["mcp-helper"]
    assert result.is_error and "may not start runs" in result.content[0].text
    assert not Run.objects.exists()


def test_bad_calls_are_tool_errors_and_start_nothing(api_server, worker, agents, user):
    other = make_user()

    async def use(session):
        results = {}
        for label, arguments in {
            "no-message": {},
            "blank": {"message": "  "},
            "not-a-string": {"message": ["hi"]},
            "nul": {"message": "hi\x00"},
            "stray": {"message": "hi", "model": "x"},
            "bad-conversation": {"message": "hi", "conversation_id": "not-a-uuid"},
            "huge-end-user": {"message": "hi", "end_user": "e" * 5000},
        }.items():
            results[label] = await session.call_tool("mcp-helper", arguments)
        with pytest.raises(MCPError) as hidden:
            await session.call_tool("mcp-hidden", {"message": "hi"})
        results["hidden"] = hidden.value
        return results

    results = _session_run(api_server.base_url, token_for(user), use)
    hidden = results.pop("hidden")
    assert hidden.code == types.INVALID_PARAMS
    for label, result in results.items():
        assert result.is_error, label
    assert "message" in results["no-message"].content[0].text
    assert not Run.objects.exists()
    # Another user's conversation cannot be continued.
    conversation = _session_run(
        api_server.base_url, token_for(other), lambda s: s.call_tool("mcp-helper", {"message": "hi"})
    ).structured_content["conversation_id"]
    result = _session_run(
        api_server.base_url,
        token_for(user),
        lambda s: s.call_tool("mcp-helper", {"message": "hi", "conversation_id": conversation}),
    )
    assert result.is_error and Run.objects.count() == 1


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer agt_wrong"}, {"Authorization": "Bearer"}],
    ids=["no-token", "bad-token", "malformed"],
)
def test_without_a_valid_token_it_is_a_401_with_a_challenge(api_server, headers):
    response = httpx.post(f"{api_server.base_url}/mcp/", json=INITIALIZE, headers={**MCP_HEADERS, **headers})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["message"]


DEEP = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": ' + b"[" * 5000 + b"]" * 5000 + b"}"


@pytest.mark.parametrize(
    "method, body",
    [
        ("POST", b"{not json"),
        ("POST", DEEP),
        ("POST", json.dumps({**INITIALIZE, "method": "\ud800"}).encode()),
        ("POST", b"[]"),
        ("PUT", b"{}"),
    ],
    ids=["not-json", "deep", "surrogate", "empty-batch", "put"],
)
def test_bad_requests_are_4xx(api_server, user, method, body):
    response = httpx.request(
        method,
        f"{api_server.base_url}/mcp/",
        content=body,
        headers={**MCP_HEADERS, "Authorization": f"Bearer {token_for(user)}"},
        timeout=30,
    )
    assert 400 <= response.status_code < 500, response.text
    assert not Run.objects.exists()


def test_a_body_past_the_sites_limit_is_refused_before_it_is_read(api_server, user):
    # Over a raw socket: the 413 comes before the body is sent, and a client still sending when the
    # server closes would see a reset instead of the answer.
    status, _, _, sent = body_post(
        api_server,
        "/mcp/",
        total=50_000_000,
        chunked=False,
        headers=f"Authorization: Bearer {token_for(user)}\r\nContent-Type: application/json\r\n",
        send_body=False,
    )
    assert status == 413 and sent == 0
    assert not Run.objects.exists()
