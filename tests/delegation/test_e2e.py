"""Agents as tools through the real queue: a worker runs the parent, its children, and the
parent again once their answers are in."""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agents.models import AgentDelegate
from conversations.models import Approval, Message, Run, RunEvent, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from engine.operations import run_cancel_by_operator
from tests.approvals.conftest import approver  # noqa: F401 (a fixture)
from tests.support.llm import agent_on
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def _status(run, *statuses: str, timeout: float = 60) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run.pk, status__in=statuses).first(),
        timeout=timeout,
        message=f"run {run.pk} to be {statuses} (is {Run.objects.get(pk=run.pk).status})",
    )


def _script(*steps: dict) -> dict:
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def _delegate(parent, child, name: str) -> AgentDelegate:
    delegate = AgentDelegate(parent=parent, child=child, tool_name=name, description=f"Ask {child.name}.")
    delegate.full_clean()
    delegate.save()
    return delegate


def _answering(fake_llm, text: str, held=None):
    """An agent that answers `text`; with `held`, once the test releases its answers."""
    step = {"content": text, **({"hold": held.label} if held else {})}
    return agent_on(fake_llm, {"scenarios": [{"match": ".", "steps": [step]}]}, tools=())


def _calling(fake_llm, calls: list[dict], reply: str = "Summary: {last_tool_result}", **fields):
    script = {"scenarios": [{"match": ".", "steps": [{"tool_calls": calls}, {"content": reply}]}]}
    return agent_on(fake_llm, script, tools=(), **fields)


def _post(agent, owner=None, content: str = "please find out") -> Run:
    return message_post(conversation=conversation_create(agent=agent, owner=owner), content=content)


def _tool_messages(fake_llm, agent) -> list[str]:
    """The tool results the agent's model was sent on its last call."""
    last = fake_llm.requests(agent.model_config.model)[-1]
    return [m["content"] for m in last["messages"] if m["role"] == "tool"]


def test_two_children_run_in_parallel_and_both_answers_reach_the_parents_next_model_call(worker, fake_llm):
    owner = User.objects.create_user("delegator")
    with fake_llm.held() as held:
        # The children's answers are held until the parent has parked: a parent whose children
        # have all ended before it parks goes on without parking (run_park_for_children).
        researcher = _answering(fake_llm, "Paris has 2.1 million people.", held)
        writer = _answering(fake_llm, "A short poem about Paris.", held)
        parent = _calling(
            fake_llm,
            [
                {"name": "ask_researcher", "arguments": {"task": "population of Paris", "fields": {"year": 2024}}},
                {"name": "ask_writer", "arguments": {"task": "a poem about Paris"}},
            ],
        )
        _delegate(parent, researcher, "ask_researcher")
        _delegate(parent, writer, "ask_writer")

        run = _status(_post(parent, owner), "awaiting_children")
        # Both children are in their model call at once: they run in parallel, not one after the other.
        held.wait_arrived(2)
        assert held.state()["waiting"] == 2
        held.release()
        run = _status(run, "completed")

    children = list(Run.objects.filter(parent_run=run).order_by("agent__id"))
    assert [c.agent_id for c in children] == [researcher.pk, writer.pk]
    assert all(c.status == "completed" and c.depth == 1 for c in children)
    assert {c.conversation.owner_id for c in children} == {owner.pk}
    assert {c.parent_tool_invocation.tool_name for c in children} == {"ask_researcher", "ask_writer"}
    # The structured fields reach the child as JSON after the task.
    asked = Message.objects.get(run=children[0], role="user").content
    assert asked.startswith("population of Paris") and '"year": 2024' in asked
    results = _tool_messages(fake_llm, parent)
    assert results == ["Paris has 2.1 million people.", "A short poem about Paris."]
    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert "run.awaiting_children" in events and events[-1] == "run.completed"
    run.refresh_from_db()
    assert run.children_tokens == sum(c.total_tokens for c in children) > 0


def test_a_failed_child_gives_the_parent_a_tool_error_it_can_read(worker, fake_llm):
    broken = agent_on(
        fake_llm,
        {"scenarios": [{"match": ".", "steps": [{"fault": {"status": 500}}]}]},
        tools=(),
        model_fields={"max_retries": 0},
    )
    parent = _calling(fake_llm, [{"name": "ask_broken", "arguments": {"task": "do it"}}])
    _delegate(parent, broken, "ask_broken")

    run = _status(_post(parent), "completed")

    child = Run.objects.get(parent_run=run)
    assert child.status == "failed"
    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.status == "error" and invocation.error == "delegated run failed"
    (result,) = _tool_messages(fake_llm, parent)
    assert result.startswith("ask_broken failed (provider_error)") and "not done" in result


def test_an_approval_inside_a_child_parks_it_and_the_decision_resumes_the_tree(worker, fake_llm, approver):  # noqa: F811
    child_script = {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {"tool_calls": [{"name": "test-counter", "arguments": {"label": "deleg-write"}}]},
                    {"content": "Counted: {last_tool_result}"},
                ],
            }
        ]
    }
    child_agent = agent_on(fake_llm, child_script, tools=("test-counter",), approval={"test-counter": "always"})
    parent = _calling(fake_llm, [{"name": "ask_counter", "arguments": {"task": "count once"}}])
    _delegate(parent, child_agent, "ask_counter")

    run = _status(_post(parent), "awaiting_children")
    child = _status(Run.objects.get(parent_run=run), "awaiting_approval")
    approval = Approval.objects.get(run=child)

    client = APIClient()
    client.force_authenticate(approver)
    # The queue shows whose delegated run asks: the parent run and its agent.
    (listed,) = [
        a for a in client.get("/api/v1/approvals/", {"status": "pending"}).json()["results"] if a["id"] == approval.pk
    ]
    assert listed["parent_run"] == str(run.pk) and listed["parent_agent"] == parent.slug
    page = Client()
    page.force_login(approver)
    card = page.get(reverse("approvals:detail", args=[approval.pk])).content.decode()
    assert "delegated by agent" in card and reverse("monitoring:run", args=[run.pk]) in card
    response = client.post(f"/api/v1/approvals/{approval.pk}/decision/", {"decision": "approve"}, format="json")
    assert response.status_code == 200

    run = _status(run, "completed")
    assert _status(child, "completed")
    (result,) = _tool_messages(fake_llm, parent)
    assert result.startswith("Counted:")


def test_cancelling_the_parent_cancels_its_children_and_theirs(worker, fake_llm):
    operator = User.objects.create_user("op", is_staff=True, is_superuser=True)
    # The grandchild waits for an approval nobody gives: the tree stays open until the cancel.
    grandchild = agent_on(
        fake_llm,
        _script({"tool_calls": [{"name": "test-counter", "arguments": {"label": "x"}}]}),
        tools=("test-counter",),
        approval={"test-counter": "always"},
    )
    middle = _calling(fake_llm, [{"name": "ask_deep", "arguments": {"task": "go deeper"}}])
    top = _calling(fake_llm, [{"name": "ask_middle", "arguments": {"task": "go"}}])
    _delegate(middle, grandchild, "ask_deep")
    _delegate(top, middle, "ask_middle")

    run = _status(_post(top), "awaiting_children")
    child = _status(Run.objects.get(parent_run=run), "awaiting_children")
    leaf = _status(Run.objects.get(parent_run=child), "awaiting_approval")
    assert leaf.depth == 2

    run_cancel_by_operator(run_id=run.pk, user=operator)

    assert _status(run, "cancelled") and _status(child, "cancelled") and _status(leaf, "cancelled")
    assert Approval.objects.get(run=leaf).status == "cancelled"
    # Each delegate call ends cancelled with its run, not "interrupted, outcome unknown".
    calls = ToolInvocation.objects.filter(run__in=[run, child]).values_list("tool_name", "status", "error")
    assert sorted(calls) == [("ask_deep", "cancelled", "run cancelled"), ("ask_middle", "cancelled", "run cancelled")]


def test_a_tree_over_the_parents_token_budget_stops_the_parent(worker, fake_llm):
    with fake_llm.held() as held:
        # The child's answer is held until the parent has parked: a child that ended first would
        # let the parent step on before the child's tokens were added to it.
        usage = {"prompt_tokens": 500, "completion_tokens": 500}
        chatty = agent_on(fake_llm, _script({"content": "long answer", "usage": usage, "hold": held.label}), tools=())
        parent = _calling(fake_llm, [{"name": "ask_chatty", "arguments": {"task": "talk"}}], run_token_budget=600)
        _delegate(parent, chatty, "ask_chatty")

        run = _status(_post(parent), "awaiting_children")
        held.release()
        run = _status(run, "completed")

    assert run.stop_reason == "budget"
    assert run.children_tokens == 1000
    # The parent's model was called once: the tree's usage stopped it before a second call.
    assert len(fake_llm.requests(parent.model_config.model)) == 1
