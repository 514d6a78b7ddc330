"""Trying a tool without a real model: an agent on the fake server's `generic` model, through a
real worker, calls its tool with arguments that fit the tool's schema and answers from the result."""

import json

import pytest
from jsonschema import Draft202012Validator

from conversations.models import LLMCall, Run, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.tool_fixtures import BOOKING_SCHEMA
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def _finish(run: Run) -> Run:
    def ended():
        run.refresh_from_db()
        return run if run.is_terminal else None

    return wait_for(ended, timeout=30, message=f"run {run.pk} to end")


@pytest.mark.parametrize(
    "provider, stream", [("openai_compatible", False), ("anthropic", True)], ids=["openai-plain", "anthropic-streamed"]
)
def test_an_agent_on_the_generic_model_exercises_its_tools(worker, fake_llm, provider, stream):
    model = ModelConfigFactory(base_url=fake_llm.api_base, model="generic", provider=provider, stream=stream)
    agent = make_agent(tools=["test-booking", "test-echo"], model_config=model)
    run = _finish(message_post(conversation=conversation_create(agent=agent), content="Book me something."))

    assert (run.status, run.stop_reason) == ("completed", "final_answer"), run.error
    invocations = {i.tool_name: i for i in ToolInvocation.objects.filter(run=run)}
    assert set(invocations) == {"test-booking", "test-echo"}
    booking = invocations["test-booking"]
    assert booking.status == "succeeded" and booking.validation_errors == []
    validator = Draft202012Validator(BOOKING_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)
    assert [e.message for e in validator.iter_errors(booking.arguments)] == []
    assert json.loads(booking.result) == {"booked": booking.arguments}
    assert invocations["test-echo"].status == "succeeded"

    # Two model steps: the calls, then an answer built from what the tools returned.
    assert LLMCall.objects.filter(run=run).count() == 2
    answer = run.messages.filter(role="assistant").order_by("-order").first().content
    assert answer.startswith("I called 2 tools.")
    arguments = json.dumps(booking.arguments, ensure_ascii=False, separators=(",", ":"))
    assert f"- test-booking with {arguments} returned: " in answer
