"""Answers in a schema on a real worker, through the REST API: a wrong answer repaired on the
second try (the run's parsed output is the object, the repair turn and both model calls are in
the ledger), and one that never matches ends schema_invalid after the agent's repair turns."""

import pytest

from conversations.models import LLMCall, Message, RunEvent
from engine.answer_schema import REPAIR_NAME
from tests.support.api import client_for
from tests.support.factories import make_user
from tests.support.llm import agent_on
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "string"}, "status": {"enum": ["shipped", "pending"]}},
    "required": ["order", "status"],
}
REPAIRED = {
    "scenarios": [
        {"match": "Platform check", "steps": [{"content": '{"order": "A-17", "status": "shipped"}'}]},
        {"match": ".", "steps": [{"content": '{"order": "A-17", "status": "on its way"}'}]},
    ]
}
NEVER = {"scenarios": [{"match": ".", "steps": [{"content": "Your order A-17 has shipped."}]}]}


def _ask(agent, text: str) -> dict:
    api = client_for(make_user())
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json").json()
    run = api.post(f"/api/v1/conversations/{conversation['id']}/messages/", {"content": text}, format="json").json()
    wait_for(
        lambda: api.get(f"/api/v1/runs/{run['id']}/").json()["status"] == "completed", timeout=60, message="the run"
    )
    return api.get(f"/api/v1/runs/{run['id']}/").json()


def test_a_wrong_answer_is_repaired_on_the_second_try(worker, fake_llm):
    agent = agent_on(fake_llm, REPAIRED, tools=[], output_schema=SCHEMA, language="en")
    run = _ask(agent, "Where is order A-17?")

    assert (run["stop_reason"], run["output_parsed"]) == ("final_answer", {"order": "A-17", "status": "shipped"})
    assert run["output"] == '{"order": "A-17", "status": "shipped"}'
    calls = list(LLMCall.objects.filter(run_id=run["id"]).order_by("id").values_list("purpose", "status"))
    assert calls == [("step", "succeeded"), ("step", "succeeded")]
    repair = Message.objects.get(run_id=run["id"], name=REPAIR_NAME)
    assert repair.role == "user" and "at $.status: 'on its way' is not one of ['shipped', 'pending']" in repair.content
    [event] = RunEvent.objects.filter(run_id=run["id"], type="answer.repair").values_list("payload", flat=True)
    assert (event["repair"], event["of"]) == (1, 2)


def test_an_answer_that_never_matches_ends_schema_invalid(worker, fake_llm):
    agent = agent_on(fake_llm, NEVER, tools=[], output_schema=SCHEMA, output_repair_turns=1, language="en")
    run = _ask(agent, "Where is order A-17?")

    assert (run["stop_reason"], run["output_parsed"]) == ("schema_invalid", None)
    assert run["output"].startswith("I stopped here: my answer had to follow a fixed format, and after 2 tries")
    assert LLMCall.objects.filter(run_id=run["id"], purpose="step").count() == 2
    assert Message.objects.filter(run_id=run["id"], name=REPAIR_NAME).count() == 1
