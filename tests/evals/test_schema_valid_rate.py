"""The schema valid rate of an eval run, through the real queue: the share of the runs held to
the agent's output schema whose answer matched it (a repaired answer counts as matching), and
nothing counted for an agent without a schema."""

import pytest

from agents.services import agent_version_current
from evals.compare import Thresholds, metric_rows
from evals.models import EvalCase, EvalResult, EvalSuite
from evals.services import eval_run_start
from tests.evals.helpers import eval_run_finished
from tests.support.llm import agent_on

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}
SCRIPT = {
    "scenarios": [
        {"match": "Platform check", "steps": [{"content": '{"total": 12}'}]},
        {"match": "at once", "steps": [{"content": '{"total": 3}'}]},
        {"match": "repaired", "steps": [{"content": "The total is 12."}]},
    ],
    "fallback": {"content": "no idea"},
}


def _suite() -> EvalSuite:
    suite = EvalSuite.objects.create(name="totals")
    for position, text in enumerate(("at once", "repaired", "never"), start=1):
        EvalCase.objects.create(suite=suite, name=text, position=position, turns=[{"role": "user", "content": text}])
    return suite


def _metrics_and_checks(agent, suite):
    eval_run = eval_run_start(suite=suite, agent_version=agent_version_current(agent=agent), repetitions=1)
    eval_run_finished(eval_run)
    eval_run.refresh_from_db()
    checks = {
        r.case.name: [c for c in r.checks if c["kind"] == "output_schema"]
        for r in EvalResult.objects.filter(eval_run=eval_run).select_related("case")
    }
    return eval_run.metrics, checks


def test_the_schema_valid_rate_counts_the_runs_held_to_the_schema(worker, fake_llm):
    suite = _suite()
    # No repair turns: each run ends at its first answer.
    held = agent_on(fake_llm, SCRIPT, tools=[], output_schema=SCHEMA, output_repair_turns=0)
    metrics, checks = _metrics_and_checks(held, suite)

    assert checks["at once"] == [
        {"kind": "output_schema", "passed": True, "reason": "the answer matched the output schema"}
    ]
    [repaired] = checks["repaired"]
    assert repaired["passed"] is False and "The answer is not JSON" in repaired["reason"]
    assert [c["passed"] for c in checks["never"]] == [False]
    assert metrics["schema_valid_rate"] == 1 / 3

    free = agent_on(fake_llm, SCRIPT, tools=[])
    metrics_free, checks_free = _metrics_and_checks(free, suite)
    assert metrics_free["schema_valid_rate"] is None and not any(checks_free.values())

    # A drop in the rate is a regression, in the console's comparison and the release gate alike.
    [row] = [r for r in metric_rows({"schema_valid_rate": 1.0}, metrics, Thresholds()) if r.name == "schema_valid_rate"]
    assert row.regression


def test_a_repaired_answer_counts_as_matching(worker, fake_llm):
    held = agent_on(fake_llm, SCRIPT, tools=[], output_schema=SCHEMA, output_repair_turns=1)
    metrics, checks = _metrics_and_checks(held, _suite())

    assert checks["repaired"] == [
        {"kind": "output_schema", "passed": True, "reason": "the answer matched the output schema after 1 repair turn"}
    ]
    # "never" is answered by the fallback, then repaired by the Platform check scenario.
    assert metrics["schema_valid_rate"] == 1.0
