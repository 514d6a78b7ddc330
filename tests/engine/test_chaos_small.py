"""A small chaos run in the suite: workers SIGKILLed at random while runs write through an
approved, non-idempotent tool; at the end nothing is lost, duplicated or left open."""

import random
import time

import pytest
from django.contrib.auth import get_user_model

from bench import counting_service
from bench.chaos_checks import chaos_report, report_ok
from bench.chaos_setup import WRITE_TOOL, chaos_agent, chaos_script
from conversations.models import TERMINAL_STATUSES, Approval, Run
from conversations.services import conversation_create
from engine.admission import message_post
from engine.approvals import approval_decide
from engine.sweeper import runs_sweep
from fakellm.testing import serve_app_in_thread

pytestmark = pytest.mark.e2e
RUNS = 12


def test_runs_survive_killed_workers_without_loss_or_duplicate_writes(worker, fake_llm):
    tally = counting_service.Tally()
    counting_url, stop = serve_app_in_thread(counting_service.create_app(tally))
    approver = get_user_model().objects.create_superuser("approver", password="x")
    agent = chaos_agent(
        llm_api_base=fake_llm.api_base,
        model=fake_llm.script("chaos-small", chaos_script(500)),
        counting_url=counting_url,
    )
    runs = [message_post(conversation=conversation_create(agent=agent), content=f"order {n}").pk for n in range(RUNS)]
    rng = random.Random(7)
    kills, next_kill = 0, time.monotonic() + rng.uniform(0.3, 1.0)
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            for approval_id in Approval.objects.filter(run__in=runs, status="pending").values_list("pk", flat=True):
                approval_decide(approval_id=approval_id, user=approver, decision="approve", channel="api")
            if kills < 3 and time.monotonic() > next_kill:
                worker.kill()
                worker.start()
                kills += 1
                next_kill = time.monotonic() + rng.uniform(0.3, 0.8)
            runs_sweep()
            if not Run.objects.filter(pk__in=runs).exclude(status__in=TERMINAL_STATUSES).exists():
                break
            time.sleep(0.2)
        report = chaos_report(run_ids=runs, write_tool=WRITE_TOOL, tally=tally.summary())
    finally:
        stop()

    assert report_ok(report), report
    # The kills landed while runs were in flight: some runs had to be recovered.
    assert kills >= 2 and report["recoveries"] >= 1, report
    assert report["statuses"] == {"completed": RUNS}, report
    assert report["writes_succeeded"] + report["writes_interrupted"] == RUNS
    assert report["writes_recorded"] <= RUNS
