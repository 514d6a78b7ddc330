"""Forks through the real queue: a worker takes each kind of fork (and a delegated tree's) to its
end, and the counting service sees no write again."""

import pytest

from agents.models import Agent, AgentDelegate
from bench.chaos_setup import WRITE_TOOL
from conversations.models import TERMINAL_STATUSES, Approval, ForkChange, Run, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from engine.approvals import approval_decide
from engine.forks import ForkRequest, run_fork
from tests.forks.conftest import booking_agent, booking_script
from tests.forks.test_fork_delegation import PARENT_SCRIPT
from tests.support.llm import agent_on, fake_model
from tests.support.runs import last_answer
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def _ended(run: Run, *, timeout: float = 60) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run.pk, status__in=TERMINAL_STATUSES).first(),
        timeout=timeout,
        message=f"run {run.pk} to end",
    )


def _status(run: Run, status: str) -> Run:
    return wait_for(lambda: Run.objects.filter(pk=run.pk, status=status).first(), timeout=60, message=status)


def _write(run: Run) -> ToolInvocation:
    return ToolInvocation.objects.get(run=run, tool_name=WRITE_TOOL)


def test_each_kind_of_fork_completes_on_a_worker(worker, fake_llm, counting, boss):
    agent = booking_agent(fake_llm, counting)
    source = _ended(message_post(conversation=conversation_create(agent=agent, owner=boss), content="order 7"))
    assert source.status == "completed" and counting.keys() == 1
    write_call = _write(source).tool_call_id
    Agent.objects.filter(pk=agent.pk).update(system_prompt="Another prompt.")
    other = fake_model(fake_llm, booking_script(answer="Other: {n}"))
    requests = [
        ForkRequest(step=1),
        ForkRequest(step=2),
        ForkRequest(step=3),
        ForkRequest(step=1, change=ForkChange.VERSION, version="draft"),
        ForkRequest(step=2, change=ForkChange.MODEL, model_config_id=other.pk),
        ForkRequest(step=1, change=ForkChange.TOOL_RESULT, tool_call_id=write_call, result="sold out"),
        ForkRequest(step=1, change=ForkChange.USER_MESSAGE, message="order 8", write_results={WRITE_TOOL: "ok"}),
    ]
    forks = [run_fork(source=source, request=request, user=boss) for request in requests]
    forks = [_ended(fork) for fork in forks]
    assert [fork.status for fork in forks] == ["completed"] * len(requests), [f.error for f in forks]
    answers = [last_answer(fork) for fork in forks]
    assert answers[:4] == [last_answer(source)] * 4
    assert answers[4:] == ["Other: 7", "Could not book order 7: sold out.", "Booked order 8: "]
    assert counting.keys() == 1 and counting.tally.summary()["requests"] == 1

    # A real write, once approved, books once with the fork's key.
    fork = run_fork(
        source=source,
        request=ForkRequest(step=1, change=ForkChange.USER_MESSAGE, message="order 9", real_writes=True),
        user=boss,
    )
    _status(fork, "awaiting_approval")
    approval_decide(approval_id=Approval.objects.get(run=fork).pk, user=boss, decision="approve", channel="api")
    assert _ended(fork).status == "completed"
    assert counting.keys() == 2 and counting.per_key() == {
        _write(source).idempotency_key: 1,
        f"{fork.pk}:{_write(fork).tool_call_id}": 1,
    }


def test_a_fork_of_a_delegated_tree_runs_its_subtree_on_a_worker(worker, fake_llm, counting, boss):
    child_agent = booking_agent(fake_llm, counting)
    parent_agent = agent_on(fake_llm, PARENT_SCRIPT, tools=())
    AgentDelegate.objects.create(parent=parent_agent, child=child_agent, tool_name="ask_booker", description="Books.")
    source = _ended(message_post(conversation=conversation_create(agent=parent_agent, owner=boss), content="go"))
    assert source.status == "completed" and counting.keys() == 1
    forks = [run_fork(source=source, request=ForkRequest(step=step), user=boss) for step in (1, 2)]
    forks.append(run_fork(source=Run.objects.get(parent_run=source), request=ForkRequest(step=1), user=boss))
    forks = [_ended(fork) for fork in forks]
    assert all(fork.status == "completed" for fork in forks)
    assert [last_answer(fork) for fork in forks[:2]] == [last_answer(source)] * 2
    child = Run.objects.get(parent_run=forks[0])
    assert _write(child).simulated and _write(forks[2]).simulated
    assert counting.keys() == 1 and counting.tally.summary()["requests"] == 1
