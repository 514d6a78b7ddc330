"""Forks in a delegated tree: a fork of the parent at the delegating step runs the subtree again,
sandboxed like the fork, and its writes get their recorded results; a child run forks too."""

import pytest

from agents.models import AgentDelegate
from bench.chaos_setup import WRITE_TOOL
from conversations.models import Approval, ForkChange, LLMCall, Run, ToolInvocation
from conversations.services import conversation_create
from engine.approvals import approval_decide
from engine.forks import ForkRequest, run_fork
from tests.forks.conftest import booking_agent
from tests.support.llm import agent_on, fake_model
from tests.support.runs import advance, last_answer, start_run

pytestmark = pytest.mark.django_db

PARENT_SCRIPT = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {"tool_calls": [{"name": "ask_booker", "arguments": {"task": "order 7"}}]},
                {"content": "Parent: {last_tool_result}"},
            ],
        }
    ]
}


def _child(run: Run) -> Run:
    return Run.objects.get(parent_run=run)


def _tree_done(parent: Run, boss) -> Run:
    """Take the parent, its child (approving its write if asked) and the parent again."""
    parent = advance(parent)
    assert parent.status == "awaiting_children", parent.error
    child = advance(_child(parent))
    for approval in Approval.objects.filter(run=child, status="pending"):
        approval_decide(approval_id=approval.pk, user=boss, decision="approve", channel="api")
        child = advance(child)
    assert child.status == "completed", child.error
    parent = advance(parent)
    assert parent.status == "completed", parent.error
    return parent


@pytest.fixture(params=["never", "always"])
def tree(request, fake_llm, counting, boss):
    """A completed parent whose child booked once (its write approved by a person or not needed)."""
    child_agent = booking_agent(fake_llm, counting, approval=request.param)
    parent_agent = agent_on(fake_llm, PARENT_SCRIPT, tools=())
    AgentDelegate.objects.create(parent=parent_agent, child=child_agent, tool_name="ask_booker", description="Books.")
    source = _tree_done(start_run(parent_agent, "please", conversation_create(agent=parent_agent, owner=boss)), boss)
    assert last_answer(source) == "Parent: Booked order 7: 1" and counting.keys() == 1
    return source


def test_a_fork_at_the_delegating_step_runs_the_subtree_again_without_booking(tree, boss, counting):
    fork = run_fork(source=tree, request=ForkRequest(step=1), user=boss)
    fork = _tree_done(fork, boss)
    child = _child(fork)
    assert child.sandbox["fork"] == str(tree.pk) and "model" not in child.sandbox
    write = ToolInvocation.objects.get(run=child, tool_name=WRITE_TOOL)
    assert write.simulated and write.status == "succeeded" and not Approval.objects.filter(run=child).exists()
    assert last_answer(fork) == last_answer(tree)
    assert counting.keys() == 1 and counting.tally.summary()["requests"] == 1


def test_a_fork_on_another_model_keeps_the_childs_own_model(tree, fake_llm, boss, counting):
    other = fake_model(fake_llm, PARENT_SCRIPT)
    fork = run_fork(
        source=tree, request=ForkRequest(step=1, change=ForkChange.MODEL, model_config_id=other.pk), user=boss
    )
    fork = _tree_done(fork, boss)
    child, source_child = _child(fork), _child(tree)
    assert "model" not in child.sandbox
    assert set(LLMCall.objects.filter(run=fork).values_list("model_name", flat=True)) == {other.model}
    assert set(LLMCall.objects.filter(run=child).values_list("model_name", flat=True)) == set(
        LLMCall.objects.filter(run=source_child).values_list("model_name", flat=True)
    )
    assert counting.keys() == 1


def test_a_fork_after_the_delegating_step_copies_the_childs_answer(tree, boss, counting):
    fork = advance(run_fork(source=tree, request=ForkRequest(step=2), user=boss))
    assert fork.status == "completed" and not Run.objects.filter(parent_run=fork).exists()
    assert last_answer(fork) == last_answer(tree) and counting.keys() == 1


@pytest.mark.parametrize("step", [1, 2])
def test_a_child_run_forks_on_its_own(tree, boss, counting, step):
    source_child = _child(tree)
    fork = advance(run_fork(source=source_child, request=ForkRequest(step=step), user=boss))
    assert fork.status == "completed" and fork.parent_run_id is None
    write = ToolInvocation.objects.get(run=fork, tool_name=WRITE_TOOL)
    assert (write.copied, write.simulated) == (step > 1, step == 1)
    assert last_answer(fork) == last_answer(source_child)
    assert not Approval.objects.filter(run=fork).exists()
    assert counting.keys() == 1 and counting.tally.summary()["requests"] == 1
