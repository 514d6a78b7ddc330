"""Forks under chaos: forks of runs that booked through the counting service are taken by
workers SIGKILLed at random; at the end every fork ended, nothing is left open, and the counting
service saw exactly the source runs' writes (a fork never books again). How many kills landed
while forks were in flight depends on the machine's speed (on a loaded one the forks may all end
before the last kill), so the test holds the outcome, not the count of kills."""

import random
import time

import pytest

from bench import counting_service
from bench.chaos_checks import chaos_report
from bench.chaos_setup import WRITE_TOOL, chaos_agent, chaos_script
from conversations.models import TERMINAL_STATUSES, Approval, ForkChange, LLMCall, Run, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from engine.approvals import approval_decide
from engine.forks import ForkRequest, run_fork
from engine.sweeper import runs_sweep
from fakellm.testing import serve_app_in_thread
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e
SOURCES = 4
# The ledger checks that hold for forks too; the write checks are the fork's own (below): a
# simulated write succeeds without reaching the counting service by design.
PROBLEMS = (
    "non_terminal",
    "lost",
    "message_gaps",
    "orphan_llm_calls",
    "repeated_llm_calls",
    "orphan_tool_calls",
    "open_ledger_rows",
    "totals_mismatch",
)


def _fork_requests(source: Run, n: int) -> list[ForkRequest]:
    write_call = ToolInvocation.objects.get(run=source, tool_name=WRITE_TOOL).tool_call_id
    return [
        ForkRequest(step=1),
        ForkRequest(step=2),
        ForkRequest(step=3),
        ForkRequest(step=1, change=ForkChange.TOOL_RESULT, tool_call_id=write_call, result="FAILED: sold out"),
        ForkRequest(step=1, change=ForkChange.USER_MESSAGE, message=f"order {n + 100}"),
        ForkRequest(
            step=1, change=ForkChange.USER_MESSAGE, message=f"order {n + 200}", write_results={WRITE_TOOL: "ok"}
        ),
    ]


def _until_ended(run_ids: list, *, worker, rng, approver=None, kills: int = 0, timeout: float = 120) -> int:
    """Approve what waits (sources only), kill the worker `kills` times at random, sweep; the kills made."""
    killed, next_kill = 0, time.monotonic() + rng.uniform(0.3, 1.0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if approver is not None:
            for approval_id in Approval.objects.filter(run__in=run_ids, status="pending").values_list("pk", flat=True):
                approval_decide(approval_id=approval_id, user=approver, decision="approve", channel="api")
        if killed < kills and time.monotonic() > next_kill:
            worker.kill()
            worker.start()
            killed += 1
            next_kill = time.monotonic() + rng.uniform(0.3, 0.8)
        runs_sweep()
        if not Run.objects.filter(pk__in=run_ids).exclude(status__in=TERMINAL_STATUSES).exists():
            break
        time.sleep(0.2)
    return killed


def test_forks_under_killed_workers_never_book_again(worker, fake_llm, boss):
    tally = counting_service.Tally()
    counting_url, stop = serve_app_in_thread(counting_service.create_app(tally))
    rng = random.Random(11)
    try:
        agent = chaos_agent(
            llm_api_base=fake_llm.api_base,
            model=fake_llm.script("chaos-forks", chaos_script(300)),
            counting_url=counting_url,
        )
        sources = [
            message_post(conversation=conversation_create(agent=agent, owner=boss), content=f"order {n}").pk
            for n in range(SOURCES)
        ]
        _until_ended(sources, worker=worker, rng=rng, approver=boss)
        assert set(Run.objects.filter(pk__in=sources).values_list("status", flat=True)) == {"completed"}
        assert tally.summary()["keys"] == SOURCES

        forks = [
            run_fork(source=source, request=request, user=boss).pk
            for n, source in enumerate(Run.objects.filter(pk__in=sources))
            for request in _fork_requests(source, n)
        ]
        _until_ended(forks, worker=worker, rng=rng, kills=3)
        # A fork never asks anyone: none has an approval to wait for.
        assert not Approval.objects.filter(run__in=forks).exists()
        wait_for(lambda: not Run.objects.filter(pk__in=forks).exclude(status__in=TERMINAL_STATUSES).exists())
        report = chaos_report(run_ids=forks, write_tool=WRITE_TOOL, tally=tally.summary())
        summary = tally.summary()
    finally:
        stop()

    assert all(report[key] == 0 for key in PROBLEMS), report
    assert report["statuses"] == {"completed": len(forks)}, report
    # Zero repeats: the effective writes are the sources', each delivered once.
    assert summary["keys"] == SOURCES and summary["requests"] == SOURCES and summary["redelivered_keys"] == 0
    writes = ToolInvocation.objects.filter(run__in=forks, tool_name=WRITE_TOOL)
    assert writes.count() == len(forks)
    for write in writes:
        # Copied from the source (a fork after step 1), given (recorded, edited or the operator's),
        # or refused unrun: never executed by the fork.
        assert write.copied or write.simulated or write.error == "not run in a fork", write
        assert write.idempotency_key not in summary["per_key"]
    for fork in Run.objects.filter(pk__in=forks):
        # The steps before the fork point (and an edited result's own step) copied, once each;
        # the rest made by the fork itself, each step answered once whatever worker died.
        copied = set(range(1, fork.fork_step))
        if fork.fork_change["kind"] == ForkChange.TOOL_RESULT:
            copied.add(fork.fork_step)
        calls = list(
            LLMCall.objects.filter(run=fork, purpose="step", status="succeeded").values_list("iteration", "copied")
        )
        assert sorted(iteration for iteration, was_copied in calls if was_copied) == sorted(copied), calls
        assert sorted(iteration for iteration, _ in calls) == list(range(1, fork.iterations + 1)), calls
