"""Remote agents as tools: an A2A agent built from the a2a-sdk's server classes, called by the
tool kind "a2a" directly and through the worker."""

import json
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from agents.models import AgentTool
from agents.snapshot import snapshot_build
from conversations.events import EventType
from conversations.models import Approval, Run, RunEvent, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from engine.approvals import approval_decide
from engine.runs import run_cancel
from tests.support.a2a_agent import EchoAgent, echo_agent  # noqa: F401 (fixture)
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.servers import petstore  # noqa: F401 (fixture)
from tests.support.waits import wait_for
from tools.executors import execute_tool
from tools.executors.sandbox import run_sandboxed
from tools.models import ToolDefinition
from tools.registry import ToolContext, registry
from tools.remote_agents import PARAMETERS, CardError, card_fetch, card_refresh, card_skills

SECRET = json.dumps({"Authorization": "Bearer remote-s3cret"})


def a2a_tool(agent, name: str = "echo-agent", skill: str = "echo", **fields) -> ToolDefinition:
    tool = ToolDefinition(
        name=name,
        description="Asks the echo agent.",
        kind="a2a",
        a2a_card_url=agent.card_url,
        a2a_skill=skill,
        a2a_secret_headers=SECRET,
        **fields,
    )
    card_refresh(tool=tool)
    tool.full_clean()
    tool.save()
    return tool


def spec_of(tool: ToolDefinition) -> dict:
    agent = make_agent()
    AgentTool.objects.create(agent=agent, tool=tool)
    return next(s for s in snapshot_build(agent=agent)["tools"] if s["name"] == tool.name)


class Ctx:
    """A ToolContext whose reports are kept and whose run is cancelled when the test says so."""

    def __init__(self):
        self.reports: list[dict] = []
        self.cancel = threading.Event()
        self.ctx = ToolContext(
            run_id="run",
            tool_call_id="call_1",
            idempotency_key="run:call_1",
            report=self.reports.append,
            cancelled=self.cancel.is_set,
        )


@pytest.mark.django_db
def test_the_card_is_fetched_through_the_guard_and_the_skill_checked_against_it(echo_agent):
    tool = a2a_tool(echo_agent)
    assert [s.id for s in card_skills(tool.a2a_card)] == ["echo", "shout"]
    assert tool.a2a_card["name"] == "Echo" and tool.a2a_card_fetched_at is not None
    assert tool.parameters == PARAMETERS
    # The card request carried the tool's credentials.
    assert echo_agent.headers[-1]["authorization"] == "Bearer remote-s3cret"

    tool.a2a_skill = "translate"
    with pytest.raises(ValidationError) as invalid:
        tool.full_clean()
    assert "translate" in str(invalid.value) and "echo, shout" in str(invalid.value)

    with pytest.raises(CardError, match="not an agent card|HTTP 404"):
        card_fetch(url=f"{echo_agent.base_url}/nothing-here", headers={})


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/page", "This is not an agent card"),
        ("/pets", "This is not an agent card: Agent card must be a JSON object"),
        ("/many", "names no interface"),
        ("/pets/999", "answered HTTP 404"),
    ],
)
def test_what_is_not_an_agent_card_is_refused_with_a_reason(petstore, path, said):
    with pytest.raises(CardError, match=said):
        card_fetch(url=f"{petstore.base_url}{path}", headers={})


@pytest.mark.django_db
def test_the_outbound_guard_refuses_a_private_agent_unless_allowed(echo_agent, settings):
    tool = a2a_tool(echo_agent)
    spec = spec_of(tool)
    settings.AGENTRY_OUTBOUND_ALLOWLIST = []
    # By another name: a connection to 127.0.0.1 that the test's earlier fetch left in the pool
    # was checked when it was opened.
    with pytest.raises(CardError, match="Cannot connect to localhost: the host is not allowed"):
        card_fetch(url=echo_agent.card_url.replace("127.0.0.1", "localhost"), headers={})
    before = len(echo_agent.started)
    outcome = execute_tool(spec=spec, arguments={"message": "hello"}, ctx=Ctx().ctx)
    assert outcome.status == "error" and "Cannot connect to 127.0.0.1" in outcome.content
    assert "loopback" in outcome.error
    assert len(echo_agent.started) == before


@pytest.mark.django_db
def test_a_call_streams_the_task_and_returns_the_answer_with_its_ids(echo_agent):
    spec = spec_of(a2a_tool(echo_agent))
    ctx = Ctx()
    outcome = execute_tool(spec=spec, arguments={"message": "hello there"}, ctx=ctx.ctx)

    assert outcome.status == "succeeded", outcome.content
    result = json.loads(outcome.content)
    assert result["state"] == "completed" and result["answer"] == "echo: hello there"
    task_id = result["task_id"]
    assert (task_id, "hello there") in echo_agent.started
    states = [r["a2a"]["state"] for r in ctx.reports]
    assert states[0] in ("submitted", "working") and states[-1] == "completed"
    assert {r["a2a"]["task_id"] for r in ctx.reports} == {task_id}
    assert echo_agent.headers[-1]["authorization"] == "Bearer remote-s3cret"
    # The credential is in neither the snapshot nor the database in clear.
    assert "remote-s3cret" not in json.dumps(spec)
    with connection.cursor() as cursor:
        cursor.execute("SELECT a2a_secret_headers FROM tools_tooldefinition WHERE name = 'echo-agent'")
        assert "remote-s3cret" not in cursor.fetchone()[0]


@pytest.fixture(scope="module")
def quiet_agent():
    agent = EchoAgent(streaming=False)
    yield agent
    agent.stop()


@pytest.mark.django_db
def test_an_agent_that_does_not_stream_is_sent_the_message_once(quiet_agent):
    ctx = Ctx()
    outcome = execute_tool(spec=spec_of(a2a_tool(quiet_agent)), arguments={"message": "hi"}, ctx=ctx.ctx)
    result = json.loads(outcome.content)
    assert result["state"] == "completed" and result["answer"] == "echo: hi"
    assert ctx.reports[-1]["a2a"] == {
        "task_id": result["task_id"],
        "context_id": result["context_id"],
        "state": "completed",
    }


@pytest.mark.django_db
def test_a_task_waiting_for_input_is_a_result_and_the_next_call_answers_it(echo_agent):
    spec = spec_of(a2a_tool(echo_agent))
    asked = execute_tool(spec=spec, arguments={"message": "ask me the weather"}, ctx=Ctx().ctx)
    assert asked.status == "succeeded"
    waiting = json.loads(asked.content)
    assert waiting["state"] == "input-required" and waiting["question"] == "Which city?"
    assert waiting["task_id"] in waiting["note"] or "task_id" in waiting["note"]

    answered = execute_tool(
        spec=spec,
        arguments={"message": "Paris", "task_id": waiting["task_id"], "context_id": waiting["context_id"]},
        ctx=Ctx().ctx,
    )
    done = json.loads(answered.content)
    assert done["state"] == "completed" and done["answer"] == "echo: Paris"
    assert done["task_id"] == waiting["task_id"] and done["context_id"] == waiting["context_id"]

    login = json.loads(execute_tool(spec=spec, arguments={"message": "login first"}, ctx=Ctx().ctx).content)
    assert login["state"] == "auth-required" and "Sign in" in login["question"]


@pytest.mark.django_db
def test_a_failed_remote_task_is_a_tool_error_the_model_can_read(echo_agent):
    outcome = execute_tool(spec=spec_of(a2a_tool(echo_agent)), arguments={"message": "fail now"}, ctx=Ctx().ctx)
    assert outcome.status == "error"
    assert "ended failed: The upstream system is down." in outcome.content


@pytest.mark.django_db
def test_cancelling_the_run_cancels_the_remote_task(echo_agent):
    spec = spec_of(a2a_tool(echo_agent))
    ctx = Ctx()
    threading.Timer(1.0, ctx.cancel.set).start()
    # "slow work" answers only after two minutes: the error says the cancellation came first.
    outcome = execute_tool(spec=spec, arguments={"message": "slow work"}, ctx=ctx.ctx)
    assert outcome.status == "error" and "The run was cancelled." in outcome.content
    task_id = ctx.reports[0]["a2a"]["task_id"]
    assert f"Remote task {task_id} was cancelled." in outcome.content
    assert task_id in echo_agent.cancelled
    assert ctx.reports[-1]["a2a"]["state"] == "canceled"


@pytest.mark.django_db
def test_the_tools_timeout_cancels_the_remote_task(echo_agent):
    spec = spec_of(a2a_tool(echo_agent, timeout_seconds=4))
    ctx = Ctx()
    outcome = execute_tool(spec=spec, arguments={"message": "slow again"}, ctx=ctx.ctx)
    assert outcome.status == "error" and "did not finish within its time limit" in outcome.content
    assert ctx.reports[0]["a2a"]["task_id"] in echo_agent.cancelled


@pytest.mark.django_db
def test_admin_fetches_the_card_checks_the_skill_and_keeps_the_token_encrypted(admin_client, echo_agent):
    form = {
        "name": "echo-agent",
        "description": "Asks the echo agent.",
        "kind": "a2a",
        "parameters": "{}",
        "side_effect": "write",
        "timeout_seconds": "30",
        "max_result_chars": "4000",
        "is_active": "on",
        "http_query_params": "[]",
        "http_headers": "{}",
        "http_max_response_bytes": "100000",
        "approval_policy": "auto",
        "approval_timeout_seconds": "86400",
        "approval_on_expiry": "continue",
        "a2a_card_url": echo_agent.card_url,
        "a2a_skill": "sing",
        "new_a2a_secret_headers": '{"Authorization": "Bearer abcdefghijkl1234"}',
    }
    refused = admin_client.post("/admin/tools/tooldefinition/add/", form)
    assert refused.status_code == 200 and "The card lists no skill" in refused.content.decode()

    response = admin_client.post("/admin/tools/tooldefinition/add/", form | {"a2a_skill": "shout"})
    assert response.status_code == 302, response.content.decode()[:3000]
    tool = ToolDefinition.objects.get(name="echo-agent")
    assert tool.a2a_card["name"] == "Echo" and tool.parameters == PARAMETERS
    assert json.loads(tool.a2a_secret_headers) == {"Authorization": "Bearer abcdefghijkl1234"}
    page = admin_client.get(f"/admin/tools/tooldefinition/{tool.pk}/change/").content.decode()
    assert "abcdefghijkl1234" not in page and "Authorization: ••••••••1234" in page
    assert "Repeats it louder." in page


def _script(fake_llm, name: str, message: str):
    fake_llm.script(
        name,
        {
            "scenarios": [
                {
                    "match": "",
                    "steps": [
                        {
                            "tool_calls": [
                                {"id": "call_remote", "name": "echo-agent", "arguments": {"message": message}}
                            ]
                        },
                        {"content": "The remote agent said: {tool:answer}"},
                    ],
                }
            ]
        },
    )
    return make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=name))


@pytest.mark.e2e
def test_a_run_calls_a_remote_agent_and_records_its_task(worker, fake_llm, echo_agent):
    agent = _script(fake_llm, "a2a-echo", "hello from a run")
    AgentTool.objects.create(agent=agent, tool=a2a_tool(echo_agent), approval=AgentTool.Approval.NEVER)
    run = message_post(conversation=conversation_create(agent=agent), content="ask the echo agent")
    run = wait_for(lambda: Run.objects.filter(pk=run.pk, status="completed").first(), message="run to complete")

    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.status == "succeeded", (invocation.result, invocation.error)
    assert json.loads(invocation.result)["answer"] == "echo: hello from a run"
    task_id = invocation.details["a2a"]["task_id"]
    assert invocation.details["a2a"]["state"] == "completed"
    assert (task_id, "hello from a run") in echo_agent.started
    progress = RunEvent.objects.filter(run=run, type=EventType.TOOL_PROGRESS).order_by("seq")
    assert progress and {e.payload["details"]["a2a"]["task_id"] for e in progress} == {task_id}
    assert progress.last().payload["tool_invocation_id"] == invocation.pk
    assert run.messages.order_by("-order").first().content == "The remote agent said: echo: hello from a run"


@pytest.mark.e2e
def test_cancelling_a_run_cancels_the_remote_agents_task(worker, fake_llm, echo_agent):
    agent = _script(fake_llm, "a2a-slow", "slow and steady")
    AgentTool.objects.create(agent=agent, tool=a2a_tool(echo_agent), approval=AgentTool.Approval.NEVER)
    run = message_post(conversation=conversation_create(agent=agent), content="start the slow one")
    invocation = wait_for(
        lambda: ToolInvocation.objects.filter(run=run, details__a2a__state="working").first(),
        message="the remote task to be working",
    )
    run_cancel(run=run)
    run = wait_for(lambda: Run.objects.filter(pk=run.pk, status="cancelled").first(), message="run to be cancelled")

    task_id = invocation.details["a2a"]["task_id"]
    wait_for(lambda: task_id in echo_agent.cancelled, message="the remote task to be cancelled")
    invocation.refresh_from_db()
    assert invocation.status == "error" and f"Remote task {task_id} was cancelled." in invocation.result


@pytest.mark.e2e
def test_a_remote_agent_is_a_write_whose_call_waits_for_approval_before_anything_is_sent(
    worker, fake_llm, echo_agent, admin_user
):
    tool = a2a_tool(echo_agent)
    assert tool.side_effect == "write"
    agent = _script(fake_llm, "a2a-approve", "approved hello")
    AgentTool.objects.create(agent=agent, tool=tool)
    before = len(echo_agent.started)
    run = message_post(conversation=conversation_create(agent=agent), content="ask after approval")
    run = wait_for(lambda: Run.objects.filter(pk=run.pk, status="awaiting_approval").first(), message="run to park")
    assert len(echo_agent.started) == before

    approval = Approval.objects.get(run=run)
    approval_decide(
        approval_id=approval.pk,
        user=admin_user,
        decision="approve",
        channel=Approval.Channel.API,
        expected_hash=approval.arguments_hash,
    )
    run = wait_for(lambda: Run.objects.filter(pk=run.pk, status="completed").first(), message="run to complete")
    assert run.messages.order_by("-order").first().content == "The remote agent said: echo: approved hello"
    assert ToolInvocation.objects.get(run=run).details["a2a"]["state"] == "completed"


def test_a_sandboxed_tool_runs_with_a_context_that_carries_the_engines_callbacks():
    # The child process gets a pickled context; the engine's callbacks (closures) stay behind.
    ctx = Ctx().ctx
    assert run_sandboxed(registry.get("calculator"), arguments={"expression": "6 * 7"}, ctx=ctx, timeout_seconds=10)
