"""What routing costs a run's steps in statements, and what it keeps across a crash: a rule that
needs no call adds none (its decision rides the first attempt's own statement, later steps read
it with the run); a classifier adds its call's two; a run taken up again after its classifier
answered is not sent to the classifier again."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import RoutingRule
from agents.snapshot import snapshot_build
from conversations.models import LLMCall
from engine.context import step_read
from engine.leases import run_claim
from engine.loop import run_advance
from engine.routing import run_route
from tests.support.llm import echo_script, fake_model
from tests.support.runs import start_run

TWO_TOOL_STEPS = echo_script("one", "two", answer="done")
# As tests/engine/test_step_statements.py counts an unrouted run of three model calls: the claim,
# its read, the version's snapshot, two per model call and one per tool step.
UNROUTED = 2 + 1 + 2 * 3 + 2


@pytest.fixture
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("a commit is one statement on PostgreSQL")


def _statements(run) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "completed", run.error
    return [query["sql"] for query in queries]


def test_a_rule_without_a_call_costs_the_run_no_statement(postgres_only, scripted_agent, fake_llm):
    agent = scripted_agent(echo_script("zero"), tools=["test-echo"])
    routed = fake_model(fake_llm, TWO_TOOL_STEPS)
    RoutingRule.objects.create(agent=agent, condition="input_length", length_over=3, model_config=routed)
    run = start_run(agent, "a long enough message")

    statements = _statements(run)

    assert len(statements) == UNROUTED, statements
    calls = LLMCall.objects.filter(run=run).order_by("pk")
    assert [call.model_config_id for call in calls] == [routed.pk] * 3
    assert run.routing["rule"] == 1 and all(call.routing == run.routing for call in calls)
    assert fake_llm.requests(agent.model_config.model) == []


def test_a_classifier_costs_its_calls_two_statements_once(postgres_only, scripted_agent, fake_llm):
    agent = scripted_agent(echo_script("zero"), tools=["test-echo"])
    routed = fake_model(fake_llm, TWO_TOOL_STEPS)
    classifier = fake_model(fake_llm, {"scenarios": [], "fallback": {"content": "code"}})
    RoutingRule.objects.create(
        agent=agent,
        condition="classifier",
        classifier_model=classifier,
        classifier_prompt="Label it.",
        labels="code",
        model_config=routed,
    )
    run = start_run(agent, "print('hi')")

    statements = _statements(run)

    assert len(statements) == UNROUTED + 2, statements
    assert len(fake_llm.requests(classifier.model)) == 1
    assert list(LLMCall.objects.filter(run=run).order_by("pk").values_list("purpose", flat=True)) == [
        "routing",
        "step",
        "step",
        "step",
    ]


def test_a_run_taken_up_again_does_not_ask_its_classifier_again(scripted_agent, fake_llm):
    agent = scripted_agent(echo_script("zero"))
    routed = fake_model(fake_llm, {"scenarios": [], "fallback": {"content": "routed"}})
    classifier = fake_model(fake_llm, {"scenarios": [], "fallback": {"content": "code"}})
    RoutingRule.objects.create(
        agent=agent,
        condition="classifier",
        classifier_model=classifier,
        classifier_prompt="Label it.",
        labels="code",
        model_config=routed,
    )
    run = start_run(agent, "print('hi')")
    assert run_claim(run_id=run.pk, owner="first-worker")
    snapshot = snapshot_build(agent=agent)
    first = run_route(run=run, owner="first-worker", snapshot=snapshot, messages=step_read(run_id=run.pk)[1])
    assert first.snapshot["model"]["id"] == routed.pk and first.new

    # The worker stopped before the step's first attempt: the labels are on the run.
    read, messages = step_read(run_id=run.pk)
    assert read.routing == {"labels": {next(iter(read.routing["labels"])): "code"}}
    again = run_route(run=read, owner="first-worker", snapshot=snapshot, messages=messages)
    assert again.decision == first.decision and again.snapshot["model"]["id"] == routed.pk
    assert len(fake_llm.requests(classifier.model)) == 1
    assert LLMCall.objects.filter(run=run, purpose="routing").count() == 1
