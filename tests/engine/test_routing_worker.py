"""Routing rules on a real worker and the fake model server (which answers per model name): a
long message goes to the rule's model and a short one to the agent's, a message with an image
to the attachment rule's, a classifier's label picks the model (its call in the ledger with
purpose routing, in the run's totals), a classifier that fails matches nothing, the fallback
still answers when the routed model fails, every step call records the decision, later steps
use the routed model without asking again, and the run's timeline shows it."""

import pytest
from django.urls import reverse

from agents.models import RoutingRule
from attachments.services import attachment_store
from conversations.models import LLMCall, Message, Run
from conversations.services import conversation_create
from engine.admission import message_post, message_submit
from tests.attachments import samples
from tests.support.factories import make_agent, make_user
from tests.support.llm import assert_totals_match_calls, fake_model
from tests.support.waits import wait_for
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace

pytestmark = pytest.mark.e2e


def _says(text: str) -> dict:
    return {"scenarios": [{"match": ".", "steps": [{"content": text}]}]}


def _tool_then_answer(text: str) -> dict:
    """A script whose model calls test-echo once, then answers `text`: a run of two steps."""
    tool_call = {"tool_calls": [{"name": "test-echo", "arguments": {"text": "x"}}]}
    return {"scenarios": [{"match": ".", "steps": [tool_call, {"content": text}]}]}


def _ended(run: Run) -> Run:
    wait_for(lambda: Run.objects.get(pk=run.pk).is_terminal, timeout=60, message="the run to end")
    run.refresh_from_db()
    return run


def _answer(run: Run) -> str:
    return Message.objects.filter(run=run, role="assistant").order_by("order").last().content


def _step_calls(run: Run) -> list[LLMCall]:
    return list(LLMCall.objects.filter(run=run, purpose="step").order_by("started_at", "pk"))


def test_a_long_message_goes_to_the_rules_model_and_a_short_one_to_the_agents(worker, fake_llm, admin_client):
    small = fake_model(fake_llm, _says("small model here"))
    big = fake_model(fake_llm, _tool_then_answer("big model here"))
    agent = make_agent(model_config=small, tools=["test-echo"])
    RoutingRule.objects.create(
        agent=agent, name="long input", condition="input_length", length_over=100, model_config=big
    )

    long_run = _ended(message_post(conversation=conversation_create(agent=agent), content="请详细解释。" * 30))
    assert (long_run.status, _answer(long_run)) == ("completed", "big model here")
    # Two steps (a tool call, then the answer), both on the routed model, the decision once.
    calls = _step_calls(long_run)
    assert [call.model_config_id for call in calls] == [big.pk, big.pk]
    decision = {
        "rule": 1,
        "rule_id": RoutingRule.objects.get().pk,
        "name": "long input",
        "condition": "input_length",
        "saw": 180,
        "model_config": {"id": big.pk, "name": big.name},
        "unmatched": [],
    }
    assert [call.routing for call in calls] == [decision, decision]
    assert long_run.routing == decision
    assert len(fake_llm.requests(big.model)) == 2

    short_run = _ended(message_post(conversation=conversation_create(agent=agent), content="hi"))
    assert _answer(short_run) == "small model here"
    [call] = _step_calls(short_run)
    assert call.model_config_id == small.pk
    assert call.routing == {"rule": None, "unmatched": [{"rule": 1, "condition": "input_length", "saw": 2}]}

    page = admin_client.get(reverse("monitoring:run", args=[long_run.pk])).content.decode()
    assert "routed by rule 1 long input (input length: 180)" in page
    page = admin_client.get(reverse("monitoring:run", args=[short_run.pk])).content.decode()
    assert "routing: no rule matched" in page


def test_a_message_with_an_image_goes_to_the_attachment_rules_model(worker, fake_llm):
    small = fake_model(fake_llm, _says("small model here"), input_kinds=["text", "image"])
    vision = fake_model(fake_llm, _says("vision model here"), input_kinds=["text", "image"])
    agent = make_agent(model_config=small)
    RoutingRule.objects.create(agent=agent, condition="attachments", attachment_kind="image", model_config=vision)
    owner = make_user()
    conversation = conversation_create(agent=agent, owner=owner)
    image = attachment_store(
        workspace=Workspace.objects.get(pk=default_workspace_id()),
        uploaded_by=owner,
        owner=owner,
        end_user="",
        data=samples.png(size=(64, 64), color=(0, 90, 200)),
        name="photo.png",
    )

    run = _ended(
        message_submit(conversation=conversation, content="what is this?", user=owner, attachments=[image]).run
    )
    assert (run.status, _answer(run)) == ("completed", "vision model here")
    [call] = _step_calls(run)
    assert (call.model_config_id, call.routing["condition"], call.routing["saw"]) == (
        vision.pk,
        "attachments",
        ["image"],
    )

    text_run = _ended(message_post(conversation=conversation_create(agent=agent), content="just text"))
    assert _answer(text_run) == "small model here"


CLASSIFIER = {
    "scenarios": [{"match": "(?i)python|代码", "steps": [{"content": "Code."}]}],
    "fallback": {"content": "chitchat"},
}


def test_a_classifiers_label_picks_the_model_and_its_call_is_spending_of_the_run(worker, fake_llm, admin_client):
    small = fake_model(fake_llm, _says("small model here"))
    coder = fake_model(fake_llm, _tool_then_answer("coder here"))
    classifier = fake_model(fake_llm, CLASSIFIER)
    agent = make_agent(model_config=small, tools=["test-echo"])
    RoutingRule.objects.create(
        agent=agent,
        name="coding",
        condition="classifier",
        classifier_model=classifier,
        classifier_prompt="Label the message: code or chitchat. Answer with the label only.",
        labels="code",
        model_config=coder,
    )

    run = _ended(message_post(conversation=conversation_create(agent=agent), content="Write a Python loop"))
    assert (run.status, _answer(run)) == ("completed", "coder here")
    # The classifier is asked once; both steps (a tool call, then the answer) use its pick.
    routing_call, step_call, second_step = LLMCall.objects.filter(run=run).order_by("started_at", "pk")
    assert (routing_call.purpose, routing_call.model_config_id, routing_call.iteration) == ("routing", classifier.pk, 0)
    assert routing_call.routing["condition"] == "classifier" and routing_call.total_tokens > 0
    assert (second_step.model_config_id, second_step.routing) == (coder.pk, step_call.routing)
    [asked] = fake_llm.requests(classifier.model)
    assert asked["messages"][0]["content"].startswith("Label the message")
    assert asked["messages"][-1]["content"] == "Write a Python loop"
    assert (step_call.purpose, step_call.model_config_id) == ("step", coder.pk)
    assert (step_call.routing["rule"], step_call.routing["saw"]) == (1, "code")
    # The classifier's tokens and cost are the run's: its totals are the sum of its calls.
    assert_totals_match_calls(run)
    assert run.total_tokens == sum(call.total_tokens for call in (routing_call, step_call, second_step))
    page = admin_client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    assert "classifier of routing rule 1 coding" in page

    chat = _ended(message_post(conversation=conversation_create(agent=agent), content="how are you"))
    assert _answer(chat) == "small model here"
    [step] = _step_calls(chat)
    assert step.routing["unmatched"] == [
        {"rule": 1, "condition": "classifier", "saw": "chitchat", "error": "an unknown label"}
    ]


def test_a_classifier_that_fails_matches_nothing_and_that_is_recorded(worker, fake_llm):
    small = fake_model(fake_llm, _says("small model here"))
    coder = fake_model(fake_llm, _says("coder here"))
    broken = fake_model(
        fake_llm, {"scenarios": [{"match": ".", "steps": [{"fault": {"status": 400, "times": 100}}]}]}, max_retries=0
    )
    agent = make_agent(model_config=small)
    RoutingRule.objects.create(
        agent=agent,
        condition="classifier",
        classifier_model=broken,
        classifier_prompt="Label it.",
        labels="code",
        model_config=coder,
    )

    run = _ended(message_post(conversation=conversation_create(agent=agent), content="Write a Python loop"))
    assert (run.status, _answer(run)) == ("completed", "small model here")
    failed = LLMCall.objects.get(run=run, purpose="routing")
    assert failed.status == "failed" and failed.http_status == 400
    [step] = _step_calls(run)
    assert step.routing == {
        "rule": None,
        "unmatched": [{"rule": 1, "condition": "classifier", "saw": None, "error": "the classifier call failed"}],
    }


def test_the_fallback_still_answers_when_the_routed_model_fails(worker, fake_llm, admin_client):
    small = fake_model(fake_llm, _says("small model here"))
    fallback = fake_model(fake_llm, _says("fallback here"))
    failing = fake_model(
        fake_llm, {"scenarios": [{"match": ".", "steps": [{"fault": {"status": 500, "times": 100}}]}]}, max_retries=0
    )
    agent = make_agent(model_config=small, fallback_model_config=fallback)
    RoutingRule.objects.create(agent=agent, condition="input_length", length_over=5, model_config=failing)

    run = _ended(message_post(conversation=conversation_create(agent=agent), content="a longer message"))
    assert (run.status, _answer(run)) == ("completed", "fallback here")
    routed, fell_back = _step_calls(run)
    assert (routed.model_config_id, routed.status, routed.http_status) == (failing.pk, "failed", 500)
    assert "fallback" not in routed.routing
    assert (fell_back.model_config_id, fell_back.status) == (fallback.pk, "succeeded")
    assert fell_back.routing == {**routed.routing, "fallback": True}
    assert fake_llm.requests(small.model) == []
    page = admin_client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    assert "the fallback model, after the routed one failed" in page


def test_the_end_users_tier_comes_from_the_message_else_the_conversation(worker, fake_llm):
    small = fake_model(fake_llm, _says("small model here"))
    premium = fake_model(fake_llm, _says("premium here"))
    agent = make_agent(model_config=small)
    RoutingRule.objects.create(agent=agent, condition="tier", tiers="gold, platinum", model_config=premium)
    owner = make_user()
    gold = conversation_create(agent=agent, owner=owner, metadata={"tier": "Gold"})

    run = _ended(message_submit(conversation=gold, content="hello", user=owner).run)
    assert _answer(run) == "premium here"
    assert _step_calls(run)[0].routing["saw"] == "gold"
    # The tier posted with the message is the one that counts.
    run = _ended(message_submit(conversation=gold, content="hello again", user=owner, metadata={"tier": "free"}).run)
    assert _answer(run) == "small model here"
    plain = _ended(message_post(conversation=conversation_create(agent=agent), content="hello"))
    assert _answer(plain) == "small model here"
