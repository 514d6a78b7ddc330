"""A small fault-injection run in the suite: the model fails a seeded share of requests (429,
500, timeout, malformed JSON, cut stream); every run ends with the stop reason the served
faults call for, and every attempt is its own recorded LLMCall."""

import uuid

import pytest

from bench.fault_checks import fault_report, report_ok
from bench.fault_setup import FAULT_KINDS, fault_agents, fault_script
from bench.stack import open_runs
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e
RUNS = 20
RATES = {"429": 0.1, "500": 0.1, "timeout": 0.05, "malformed_json": 0.08, "cut_stream": 0.07}
# With this seed all five kinds are among the first 40 draws, and every run makes at least two
# requests: each kind is served whichever runs the draws land on.
SEED = 7


def test_runs_on_a_faulty_model_end_right_with_every_attempt_recorded(worker, fake_llm):
    # The read timeout leaves a loaded machine room to read an answered request; the timeout fault
    # outlasts it.
    script = fault_script(rates=RATES, seed=SEED, latency_ms=10, timeout_ms=6000, retry_after=0.1)
    model = fake_llm.script(f"faults-{uuid.uuid4().hex[:8]}", script)
    agents = fault_agents(llm_api_base=fake_llm.api_base, model=model, max_retries=1, read_timeout=2.5, prefix=model)
    runs = [
        message_post(conversation=conversation_create(agent=agents[n % 2]), content=f"question {n}").pk
        for n in range(RUNS)
    ]
    wait_for(lambda: open_runs(runs) == 0, timeout=120, interval=0.2, message="every run to end")

    report = fault_report(run_ids=runs, script=script, requests=fake_llm.requests(model))

    assert report_ok(report), report
    assert set(report["faults_served"]) == set(FAULT_KINDS), report
    # Two attempts per step at a 40 % fault rate: some runs get through on a retry and some do
    # not (the odds that all twenty end alike are below one in 10^4).
    endings = {ending.split()[1] for ending in report["endings"]}
    assert endings == {"completed/final_answer", "failed/provider_error"}, report
    assert report["retry_attempts"] > 0 and report["runs_recovered_by_retry"] > 0, report
