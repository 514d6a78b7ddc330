"""Guardrails on a real worker (its engine loop, greenlets and all): the user's phone number
redacted before the model sees it, a moderator's call on the answer, which blocks it, and the
run's totals still the sum of its calls."""

import pytest

from agents.models import GuardrailRule
from conversations.models import GuardrailTrigger, LLMCall, Message, Run
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.llm import agent_on, assert_totals_match_calls, fake_model
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

ANSWER = {"scenarios": [{"match": ".", "steps": [{"content": "可以用炸弹，电话13912345678"}]}]}
MODERATOR = {
    "scenarios": [{"match": "炸弹", "steps": [{"content": '{"verdict": "block", "reason": "weapons"}'}]}],
    "fallback": {"content": '{"verdict": "allow"}'},
}


def test_a_worker_enforces_input_and_output_guardrails(worker, fake_llm):
    agent = agent_on(fake_llm, ANSWER, tools=[], language="en")
    moderator = fake_model(fake_llm, MODERATOR)
    GuardrailRule.objects.create(agent=agent, side="input", kind="pii_phone", action="redact")
    GuardrailRule.objects.create(
        agent=agent, side="output", kind="moderation", action="block", model_config=moderator, rubric="No weapons."
    )

    run = message_post(conversation=conversation_create(agent=agent), content="我的电话是+86 138 1234 5678，请回电")
    wait_for(lambda: Run.objects.get(pk=run.pk).is_terminal, timeout=60, message="the run to end")

    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("completed", "guardrail_blocked")
    [request] = fake_llm.requests(agent.model_config.model)
    assert request["messages"][-1]["content"] == "我的电话是[redacted:phone]，请回电"
    [answer] = Message.objects.filter(run=run, role="assistant").values_list("content", flat=True)
    assert answer.startswith("I cannot give the answer I came up with") and "炸弹" not in answer
    assert list(GuardrailTrigger.objects.filter(run=run).order_by("id").values_list("side", "action", "matched")) == [
        ("input", "redact", "***5678"),
        ("output", "block", "weapons"),
    ]
    assert sorted(LLMCall.objects.filter(run=run).values_list("purpose", flat=True)) == ["moderation", "step"]
    assert_totals_match_calls(run)
