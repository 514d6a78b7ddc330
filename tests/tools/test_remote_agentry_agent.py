"""A remote agent tool calling another Agentry agent over A2A (one stack calling itself, through
the live server and the real worker): the caller's invocation keeps the remote task, and the
usage the remote reports agrees with the remote run's own ledger. Runs once the A2A server
(a2a_server, tests.support.a2a) is in the tree."""

import json
import uuid

import pytest

pytest.importorskip("a2a_server")

from agents.models import AgentTool  # noqa: E402
from conversations.models import LLMCall, Run, RunTrigger, ToolInvocation  # noqa: E402
from conversations.services import conversation_create  # noqa: E402
from conversations.usage import usage_values  # noqa: E402
from engine.admission import message_post  # noqa: E402
from tests.support.a2a import a2a_expose  # noqa: E402, F401 - fixture
from tests.support.factories import ModelConfigFactory, make_agent  # noqa: E402
from tests.support.waits import wait_for  # noqa: E402
from tools.models import ToolDefinition  # noqa: E402
from tools.remote_agents import card_refresh  # noqa: E402

pytestmark = pytest.mark.e2e


def test_a_remote_agent_tool_calls_another_agentry_agent_and_the_ledgers_agree(worker, fake_llm, a2a_expose):
    callee_model = fake_llm.script(f"callee-{uuid.uuid4().hex[:8]}", {"fallback": {"content": "Hello from Agentry."}})
    callee = make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=callee_model), slug="callee")
    exposed = a2a_expose(callee)

    tool = ToolDefinition(
        name="ask-callee",
        description="Asks the other agent.",
        kind="a2a",
        a2a_card_url=exposed.card_url,
        a2a_skill=callee.slug,
        a2a_secret_headers=json.dumps(exposed.headers),
    )
    card_refresh(tool=tool)
    tool.full_clean()
    tool.save()
    script = {
        "scenarios": [
            {
                "match": "",
                "steps": [
                    {"tool_calls": [{"id": "call_a2a", "name": "ask-callee", "arguments": {"message": "say hello"}}]},
                    {"content": "It said: {tool:answer}"},
                ],
            }
        ]
    }
    caller_model = fake_llm.script(f"caller-{uuid.uuid4().hex[:8]}", script)
    caller = make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=caller_model))
    AgentTool.objects.create(agent=caller, tool=tool, approval=AgentTool.Approval.NEVER)

    run = message_post(conversation=conversation_create(agent=caller), content="ask the other agent")
    run = wait_for(lambda: Run.objects.filter(pk=run.pk, status="completed").first(), timeout=60, message="the caller")

    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.status == "succeeded", (invocation.result, invocation.error)
    assert json.loads(invocation.result)["answer"] == "Hello from Agentry."
    remote = Run.objects.get(pk=invocation.details["a2a"]["task_id"])
    assert remote.trigger == RunTrigger.A2A and remote.agent_id == callee.pk and remote.status == "completed"
    reported = invocation.details["a2a"]["metadata"]["agentry"]
    assert reported["run_id"] == str(remote.pk)
    assert {k: int(v) for k, v in reported["usage"].items()} == usage_values(remote)
    assert remote.total_tokens == sum(call.total_tokens for call in LLMCall.objects.filter(run=remote)) > 0
    assert run.messages.order_by("-order").first().content == "It said: Hello from Agentry."
