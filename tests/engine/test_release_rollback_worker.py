"""A rollback through the real queue: new conversations get the earlier version at once, while a
run already on a worker finishes on the version it started with."""

import pytest

from agents.models import Agent
from agents.releases import version_publish, version_rollback
from conversations.models import LLMCall, Run
from conversations.services import conversation_create
from engine.admission import message_post
from tests.security.privileges import user_with
from tests.support.llm import agent_on
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def _tool_then_answer(held) -> dict:
    """A tool call, then the answer; the first model call is answered once the test releases it."""
    steps = [
        {"tool_calls": [{"name": "test-echo", "arguments": {"text": "x"}}], "hold": held.label},
        {"content": "done"},
    ]
    return {"scenarios": [{"match": ".", "steps": steps}]}


def _system_prompts(run: Run) -> set[str]:
    prompts = set()
    for request in LLMCall.objects.filter(run=run).values_list("request", flat=True):
        prompts |= {m["content"] for m in request["messages"] if m["role"] == "system"}
    return prompts


def test_rollback_serves_new_conversations_while_a_run_in_flight_keeps_its_version(worker, fake_llm):
    operator = user_with("agents.publish_agent")
    with fake_llm.held() as held:
        agent = agent_on(fake_llm, _tool_then_answer(held), tools=["test-echo"], system_prompt="Prompt one.")
        first = version_publish(agent=agent, user=operator, note="One.").version
        Agent.objects.filter(pk=agent.pk).update(system_prompt="Prompt two.")
        second = version_publish(agent=agent, user=operator, note="Two.").version

        in_flight = message_post(conversation=conversation_create(agent=agent), content="go")
        held.wait_arrived()  # the run's first model call is in flight
        version_rollback(agent=agent, version=first, user=operator, note="Two misbehaves.")
        assert Run.objects.get(pk=in_flight.pk).status == "running"
        after = message_post(conversation=conversation_create(agent=agent), content="go")
        held.release()

    ended = wait_for(
        lambda: Run.objects.filter(pk__in=[in_flight.pk, after.pk], status="completed").count() == 2,
        timeout=60,
        message="both runs to complete",
    )
    assert ended
    in_flight.refresh_from_db()
    after.refresh_from_db()
    assert in_flight.agent_version == second and _system_prompts(in_flight) == {"Prompt two."}
    assert LLMCall.objects.filter(run=in_flight).count() == 2  # it went on after the rollback
    assert after.agent_version == first and _system_prompts(after) == {"Prompt one."}
