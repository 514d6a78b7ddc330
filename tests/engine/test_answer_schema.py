"""Answers in a schema, driven in-process against the fake model over real HTTP: a valid answer
kept on the run at no extra statement, a wrong one repaired with a ledger row the model sees,
one that never matches ending schema_invalid, and a model that keeps to a schema asked with it."""

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations.models import LLMCall, Message, RunEvent
from engine.answer_schema import REPAIR_NAME
from engine.loop import run_advance
from notifications.models import Webhook, WebhookDelivery
from tests.support.runs import advance, last_answer, start_run

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
}
VALID = '{"city": "Beijing", "temperature": 21}'


def script(*steps, repaired=None):
    scenarios = [{"match": "Platform check", "steps": [{"content": repaired}]}] if repaired else []
    return {"scenarios": [*scenarios, {"match": ".", "steps": list(steps)}]}


def _statements(run) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)
    return [query["sql"] for query in queries]


def test_a_valid_answer_is_kept_on_the_run_without_another_statement(scripted_agent):
    if connection.vendor != "postgresql":
        pytest.skip("statements are counted on PostgreSQL")
    free = start_run(scripted_agent(script({"content": VALID})))
    held = start_run(scripted_agent(script({"content": f"```json\n{VALID}\n```"}), output_schema=SCHEMA))

    assert len(_statements(held)) == len(_statements(free))
    free.refresh_from_db()
    held.refresh_from_db()
    assert (held.status, held.stop_reason, held.output_parsed) == (
        "completed",
        "final_answer",
        {"city": "Beijing", "temperature": 21},
    )
    assert free.output_parsed is None


def test_a_wrong_answer_is_repaired_on_the_second_try(scripted_agent, fake_llm):
    agent = scripted_agent(script({"content": "It is 21 degrees in Beijing."}, repaired=VALID), output_schema=SCHEMA)
    run = advance(start_run(agent, "Weather in Beijing?"))

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    assert run.output_parsed == {"city": "Beijing", "temperature": 21}
    assert run.iterations == 2 and LLMCall.objects.filter(run=run, purpose="step").count() == 2
    roles = list(Message.objects.filter(run=run).order_by("order").values_list("role", "name"))
    assert roles == [("user", ""), ("assistant", ""), ("user", REPAIR_NAME), ("assistant", "")]
    repair = Message.objects.get(run=run, name=REPAIR_NAME)
    assert repair.content.startswith("[Platform check, not the user]") and "The answer is not JSON" in repair.content
    # The model saw the repair turn after its own wrong answer.
    second = fake_llm.requests(agent.model_config.model)[-1]
    assert [m["role"] for m in second["messages"][-3:]] == ["user", "assistant", "user"]
    assert second["messages"][-1]["content"] == repair.content and "name" not in second["messages"][-1]
    [event] = RunEvent.objects.filter(run=run, type="answer.repair")
    first_call = LLMCall.objects.filter(run=run).order_by("id").first()
    assert event.payload["llm_call_id"] == first_call.pk and (event.payload["repair"], event.payload["of"]) == (1, 2)
    assert last_answer(run) == VALID


def test_an_answer_that_never_matches_ends_schema_invalid_after_the_repairs(scripted_agent):
    agent = scripted_agent(
        script({"content": '{"city": "Beijing"}'}), output_schema=SCHEMA, output_repair_turns=3, language="en"
    )
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason, run.output_parsed) == ("completed", "schema_invalid", None)
    assert LLMCall.objects.filter(run=run, purpose="step").count() == 4
    assert Message.objects.filter(run=run, name=REPAIR_NAME).count() == 3
    assert RunEvent.objects.filter(run=run, type="answer.repair").count() == 3
    assert "after 4 tries it still did not" in last_answer(run)
    assert "'temperature' is a required property" in run.error


def test_a_model_that_keeps_to_a_schema_is_asked_with_it(scripted_agent, fake_llm):
    agent = scripted_agent(script({"content": VALID}), output_schema=SCHEMA, model_fields={"structured_output": True})
    run = advance(start_run(agent))

    assert run.output_parsed == {"city": "Beijing", "temperature": 21}
    [request] = fake_llm.requests(agent.model_config.model)
    assert request["response_format"] == {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}


def test_a_model_without_structured_output_is_asked_for_text(scripted_agent, fake_llm):
    agent = scripted_agent(script({"content": VALID}), output_schema=SCHEMA)
    advance(start_run(agent))
    [request] = fake_llm.requests(agent.model_config.model)
    assert "response_format" not in request


def test_a_valid_answer_ended_in_a_statement_of_its_own_keeps_its_value(scripted_agent):
    # A listening webhook ends the run after the answer's commit, in the ending's transaction.
    agent = scripted_agent(script({"content": VALID}), output_schema=SCHEMA)
    Webhook.objects.create(agent=agent, url="https://hooks.example.com/agentry", secret="s" * 32)
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason, run.output_parsed) == (
        "completed",
        "final_answer",
        {"city": "Beijing", "temperature": 21},
    )
    assert WebhookDelivery.objects.get(run_event__run=run).event_type == "run.completed"


def test_the_run_admin_shows_the_parsed_output(scripted_agent, client):
    run = advance(start_run(scripted_agent(script({"content": VALID}), output_schema=SCHEMA)))
    client.force_login(User.objects.create_superuser(username="root", password="pw"))

    page = client.get(reverse("admin:conversations_run_change", args=[run.pk])).content.decode()

    assert "Answer in a schema</h2>" in page and "&quot;temperature&quot;: 21" in page
