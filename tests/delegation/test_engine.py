"""Agents as tools, driven in-process (so on SQLite too): configuration checks on save, the
delegate in the snapshot, the parent parking and resuming, and refusals the model can read."""

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from agents.models import AgentDelegate
from agents.services import agent_version_current
from agents.snapshot import DELEGATE_KIND, snapshot_tool
from conversations.models import Message, Run, ToolInvocation
from conversations.retention import _runs_delete
from conversations.services import conversation_create
from engine.runs import run_cancel
from platform_site.telemetry import tracing
from tests.platform.test_tracing import receiver  # noqa: F401 (a fixture)
from tests.support.admin_forms import agent_admin_inlines
from tests.support.llm import agent_on
from tests.support.runs import advance, start_run

pytestmark = pytest.mark.django_db


def _script(*steps: dict) -> dict:
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def _answering(fake_llm, text: str):
    return agent_on(fake_llm, _script({"content": text}), tools=())


def _calling(fake_llm, name: str, task: str = "do it"):
    """An agent that calls `name` once, then answers with what the call returned."""
    steps = ({"tool_calls": [{"name": name, "arguments": {"task": task}}]}, {"content": "Got: {last_tool_result}"})
    return agent_on(fake_llm, _script(*steps), tools=())


def _delegate(parent, child, name: str, *, check: bool = True) -> AgentDelegate:
    delegate = AgentDelegate(parent=parent, child=child, tool_name=name, description=f"Ask {child.name}.")
    if check:
        delegate.full_clean()
    delegate.save()
    return delegate


def _only_child(run: Run) -> Run:
    return Run.objects.get(parent_run=run)


def _tool_result(run: Run) -> ToolInvocation:
    return ToolInvocation.objects.get(run=run)


@pytest.fixture
def agents(fake_llm, no_enqueue):
    return lambda n: [_answering(fake_llm, f"answer {i}") for i in range(n)]


def test_cycles_self_delegation_and_over_deep_chains_are_refused_on_save(agents):
    a, b, c, d, e = agents(5)
    _delegate(a, b, "ask_b")
    _delegate(b, c, "ask_c")
    with pytest.raises(ValidationError, match="cycle"):
        _delegate(c, a, "ask_a")
    with pytest.raises(ValidationError, match="itself"):
        _delegate(a, a, "ask_self")
    _delegate(c, d, "ask_d")  # a → b → c → d: three delegations, the default limit
    with pytest.raises(ValidationError, match="chain of 4 delegations"):
        _delegate(d, e, "ask_e")
    with override_settings(AGENTRY_DELEGATION_MAX_DEPTH=4):
        _delegate(d, e, "ask_e")
    # A disabled delegate is no edge: it may close a loop until someone enables it.
    AgentDelegate(parent=e, child=a, tool_name="ask_a", description="x", enabled=False).full_clean()


def test_the_admin_shows_a_cycle_as_a_form_error(client, agents):
    a, b = agents(2)
    _delegate(a, b, "ask_a_b")
    client.force_login(User.objects.create_superuser("root", password="pw"))
    url = reverse("admin:agents_agent_change", args=[b.pk])
    form = {
        "name": b.name,
        "slug": b.slug,
        "is_active": "on",
        "time_zone": "UTC",
        "language": "en",
        "model_config": b.model_config_id,
        "max_iterations": 8,
        "max_same_tool_streak": 3,
        "tool_choice": "auto",
        "parallel_tool_calls": "on",
        "concurrent_messages": "reject",
        **agent_admin_inlines(delegates=1),
        "delegates-0-tool_name": "ask_back",
        "delegates-0-child": a.pk,
        "delegates-0-description": "Ask the first agent.",
        "delegates-0-enabled": "on",
    }
    response = client.post(url, form)
    assert response.status_code == 200
    assert "would make a cycle" in response.content.decode()
    assert not AgentDelegate.objects.filter(parent=b).exists()
    form["delegates-0-enabled"] = ""  # disabled, it saves
    assert client.post(url, form).status_code == 302


def test_a_delegate_is_a_tool_of_the_parents_snapshot_and_a_new_version(agents):
    parent, child = agents(2)
    before = agent_version_current(agent=parent)
    _delegate(parent, child, "ask_child")
    version = agent_version_current(agent=parent)
    assert version.number == before.number + 1
    spec = snapshot_tool(version.snapshot, "ask_child")
    assert spec["kind"] == DELEGATE_KIND and spec["id"] is None
    assert spec["delegate"]["agent_id"] == child.pk and spec["parameters"]["required"] == ["task"]
    AgentDelegate.objects.filter(parent=parent).update(enabled=False)
    assert snapshot_tool(agent_version_current(agent=parent).snapshot, "ask_child") is None


def test_the_parent_parks_for_its_child_and_reads_its_answer(fake_llm, agents):
    owner = User.objects.create_user("owner")
    (child_agent,) = agents(1)
    parent_agent = _calling(fake_llm, "ask_child", task="what is 2+2")
    _delegate(parent_agent, child_agent, "ask_child")
    run = start_run(parent_agent, conversation=conversation_create(agent=parent_agent, owner=owner))

    run = advance(run)
    assert run.status == "awaiting_children"
    child = _only_child(run)
    assert child.status == "queued" and child.depth == 1 and child.conversation.owner == owner
    assert child.parent_tool_invocation == _tool_result(run) and _tool_result(run).status == "running"
    assert Message.objects.get(run=child, role="user").content == "what is 2+2"

    child = advance(child)
    assert child.status == "completed"
    run.refresh_from_db()
    assert run.status == "queued" and run.children_tokens == child.total_tokens > 0

    run = advance(run)
    assert run.status == "completed"
    assert _tool_result(run).result == "answer 0" and _tool_result(run).status == "succeeded"
    assert Message.objects.filter(run=run, role="assistant").last().content == "Got: answer 0"

    # The API and the timeline page show the tree.
    api = APIClient()
    api.force_authenticate(owner)
    detail = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert detail["parent_run"] is None and [c["id"] for c in detail["children"]] == [str(child.pk)]
    assert detail["children"][0]["parent_tool_invocation"] == _tool_result(run).pk
    assert api.get(f"/api/v1/runs/{child.pk}/").json()["parent_run"] == str(run.pk)
    steps = api.get(f"/api/v1/runs/{run.pk}/steps/").json()
    tool_steps = [s for s in (steps.get("results", steps)) if s["kind"] == "tool_invocation"]
    assert tool_steps[0]["child_runs"] == [str(child.pk)]
    operator = User.objects.create_superuser("root", password="pw")
    api.force_authenticate(None)
    page = APIClient()
    page.force_login(operator)
    html = page.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    assert reverse("monitoring:run", args=[child.pk]) in html
    child_html = page.get(reverse("monitoring:run", args=[child.pk])).content.decode()
    assert 'id="parent-run"' in child_html
    admin_page = page.get(reverse("admin:conversations_run_change", args=[child.pk]))
    assert admin_page.status_code == 200 and str(run.pk) in admin_page.content.decode()

    # A purge of the parent alone leaves the child, without its link.
    _runs_delete([run.pk])
    child.refresh_from_db()
    assert child.parent_run_id is None and child.parent_tool_invocation_id is None


def test_past_the_depth_limit_the_call_is_a_tool_error_the_model_reads(fake_llm, agents):
    (leaf,) = agents(1)
    middle = _calling(fake_llm, "ask_leaf")
    top = _calling(fake_llm, "ask_middle")
    _delegate(middle, leaf, "ask_leaf")
    _delegate(top, middle, "ask_middle")
    with override_settings(AGENTRY_DELEGATION_MAX_DEPTH=1):
        run = advance(start_run(top))
        child = advance(_only_child(run))
    assert child.status == "completed" and not Run.objects.filter(parent_run=child).exists()
    refused = _tool_result(child)
    assert refused.status == "error" and refused.error == "delegation refused"
    assert "1 levels deep" in refused.result
    run = advance(run)
    assert "was not called" in Message.objects.filter(run=run, role="assistant").last().content


def test_a_cycle_pinned_before_the_graph_refused_it_is_refused_at_run_time(fake_llm, no_enqueue):
    first = _calling(fake_llm, "ask_second")
    second = _calling(fake_llm, "ask_first")
    _delegate(first, second, "ask_second")
    _delegate(second, first, "ask_first", check=False)  # as if saved before a check existed
    run = advance(start_run(first))
    child = advance(_only_child(run))
    refused = _tool_result(child)
    assert refused.error == "delegation refused" and "higher up" in refused.result
    assert not Run.objects.filter(parent_run=child).exists()
    assert advance(run).status == "completed"


def test_a_child_deadline_is_bounded_by_the_parents(fake_llm, agents):
    (child_agent,) = agents(1)
    parent_agent = agent_on(
        fake_llm,
        _script({"tool_calls": [{"name": "ask", "arguments": {"task": "x"}}]}, {"content": "ok"}),
        tools=(),
        run_timeout_seconds=60,
    )
    _delegate(parent_agent, child_agent, "ask")
    run = advance(start_run(parent_agent))
    child = _only_child(run)
    assert child.deadline is not None and child.deadline <= run.deadline


# Commits: a parent's end cancels its children in an on_commit callback.
@pytest.mark.django_db(transaction=True)
def test_a_child_that_uses_up_the_parents_budget_stops_the_tree_at_once(fake_llm, agents):
    (slow,) = agents(1)
    chatty = agent_on(
        fake_llm,
        _script({"content": "long answer", "usage": {"prompt_tokens": 500, "completion_tokens": 500}}),
        tools=(),
    )
    calls = [{"name": "ask_chatty", "arguments": {"task": "talk"}}, {"name": "ask_slow", "arguments": {"task": "wait"}}]
    parent_agent = agent_on(
        fake_llm, _script({"tool_calls": calls}, {"content": "done"}), tools=(), run_token_budget=600
    )
    _delegate(parent_agent, chatty, "ask_chatty")
    _delegate(parent_agent, slow, "ask_slow")
    run = advance(start_run(parent_agent))
    first, second = Run.objects.filter(parent_run=run).order_by("parent_tool_invocation__position")

    advance(first)
    run.refresh_from_db()
    # The tree is over budget: the parent does not wait for the second child.
    assert run.status == "queued" and run.children_tokens == 1000
    second.refresh_from_db()
    assert second.status == "queued"

    run = advance(run)
    assert run.status == "completed" and run.stop_reason == "budget"
    assert "used 1" in Message.objects.filter(run=run, role="assistant").last().content
    second.refresh_from_db()
    assert second.status == "cancelled"


# Commits: a parent's end cancels its children in an on_commit callback.
@pytest.mark.django_db(transaction=True)
def test_cancelling_a_parked_parent_cancels_its_queued_child(fake_llm, agents):
    (child_agent,) = agents(1)
    parent_agent = _calling(fake_llm, "ask")
    _delegate(parent_agent, child_agent, "ask")
    run = advance(start_run(parent_agent))
    child = _only_child(run)
    run_cancel(run=run)
    run.refresh_from_db()
    child.refresh_from_db()
    assert run.status == child.status == "cancelled"
    # The call's outcome is known, not "interrupted, outcome unknown": it was cancelled with its child.
    call = _tool_result(run)
    assert (call.status, call.error) == ("cancelled", "run cancelled") and call.finished_at is not None
    assert "outcome is unknown" not in call.result and "cancelled with it" in call.result


def test_with_tracing_on_a_child_run_continues_its_parents_trace(fake_llm, agents, receiver):  # noqa: F811
    tracing.start(endpoint=f"{receiver.url}/v1/traces")
    (child_agent,) = agents(1)
    parent_agent = _calling(fake_llm, "ask")
    _delegate(parent_agent, child_agent, "ask")
    run = advance(start_run(parent_agent))
    child = _only_child(run)
    assert len(run.trace_id) == 32 and child.trace_id == run.trace_id
    assert child.trace_parent_span_id == run.trace_span_id != child.trace_span_id
