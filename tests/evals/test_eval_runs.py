"""Eval runs through the real queue: every case N times as ordinary runs of the engine, write
tools never executed, and metrics equal to a count by hand over the ledger."""

import statistics

import pytest
from django.core.management import call_command

from agents.services import agent_version_current
from conversations.models import Run, ToolInvocation
from evals.models import EvalResult
from evals.services import eval_run_start
from tests.evals.helpers import BROKEN_SCRIPT, SCRIPT, eval_run_finished, four_case_suite
from tests.support.factories import ModelConfigFactory
from tests.support.llm import agent_on

pytestmark = pytest.mark.django_db(transaction=True)


def test_eval_run_metrics_equal_a_hand_count(worker, fake_llm, executions):
    agent = agent_on(fake_llm, SCRIPT, tools=["test-counter", "test-echo"])
    suite = four_case_suite()
    eval_run = eval_run_start(suite=suite, agent_version=agent_version_current(agent=agent), repetitions=2)
    eval_run_finished(eval_run)
    eval_run.refresh_from_db()

    # The write tool never ran: given a result it was simulated, without one its call failed.
    assert executions("eval-apples") == 0 and executions("eval-pears") == 0
    apples = ToolInvocation.objects.filter(run__eval_result__case__name="apples")
    assert [(i.status, i.simulated, i.result) for i in apples] == [
        ("succeeded", True, '{"recorded": "eval-apples"}')
    ] * 2
    pears = ToolInvocation.objects.filter(run__eval_result__case__name="pears")
    assert {(i.status, i.simulated, i.error) for i in pears} == {("error", False, "not run in an evaluation")}

    # Each repetition is an ordinary run in its own conversation, marked as an evaluation's.
    results = list(EvalResult.objects.filter(eval_run=eval_run).select_related("run", "case"))
    runs = [r.run for r in results]
    assert len(results) == 8 and len({run.conversation_id for run in runs}) == 8
    assert all(run.status == "completed" and run.sandbox is not None for run in runs)
    # Prior turns are in the conversation before the case's last user message.
    apples_run = next(r.run for r in results if r.case.name == "apples")
    assert [m.content for m in apples_run.conversation.messages.order_by("order")][:3] == [
        "hi",
        "Hello!",
        "count apples please",
    ]

    passed = {(r.case.name, r.repetition): r.passed for r in results}
    assert passed == {
        (c, n): c in ("apples", "greeting") for c in ("apples", "pears", "greeting", "say-hi") for n in (1, 2)
    }
    say_hi = next(r for r in results if r.case.name == "say-hi")
    assert [c for c in say_hi.checks if not c["passed"]] == [
        {"kind": "no_tool", "passed": False, "reason": "called test-echo"}
    ]

    # By hand: expected calls 4 (apples ×2 met, pears ×2 not: "plums" is not in its arguments);
    # tool calls 6, of which say-hi's 2 lack "text"; the guarded cases are greeting and say-hi.
    tokens = [run.total_tokens for run in runs]
    costs = [float(run.cost) for run in runs]
    latencies = sorted(int((run.finished_at - run.started_at).total_seconds() * 1000) for run in runs)
    metrics = eval_run.metrics
    assert metrics["results"] == 8 and metrics["cases"] == 4
    assert metrics["tool_hit_rate"] == 2 / 4
    assert metrics["argument_validity_rate"] == 4 / 6
    assert metrics["task_completion_rate"] == 4 / 8
    assert metrics["wrong_call_rate"] == 2 / 4
    assert metrics["avg_model_turns"] == (2 + 2 + 1 + 2) * 2 / 8
    assert metrics["tokens_per_task"] == sum(tokens) / 8
    assert metrics["cost_per_task"] == pytest.approx(sum(costs) / 8)
    assert metrics["latency_p50_ms"] == latencies[3] and metrics["latency_p95_ms"] == latencies[7]
    assert metrics["pass_at_k"] == 2 / 4 and metrics["pass_all_k"] == 2 / 4
    assert (metrics["pass_rate_min"], metrics["pass_rate_max"]) == (0.5, 0.5)
    assert metrics["pass_rate_stdev"] == statistics.pstdev([0.5, 0.5])
    assert eval_run.finished_at is not None


def test_a_regression_makes_the_command_exit_non_zero(worker, fake_llm, capsys):
    agent = agent_on(fake_llm, SCRIPT, tools=["test-counter", "test-echo"])
    four_case_suite()
    baseline = agent_version_current(agent=agent)
    broken = ModelConfigFactory(base_url=fake_llm.api_base, model=fake_llm.script("eval-broken", BROKEN_SCRIPT))
    agent.model_config = broken
    agent.save()
    agent.refresh_from_db()

    with pytest.raises(SystemExit) as exited:
        call_command("agentry_eval", agent.slug, suite="basics", version="current", against=str(baseline.number))
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out
    # Regressions come first: the completion rate fell from 50% to 0%.
    first_metric = out.split("metric")[1].strip().splitlines()[1]
    assert first_metric.startswith("task_completion_rate") and "REGRESSION" in first_metric

    # Against itself (the finished eval run is reused) there is no regression.
    call_command("agentry_eval", agent.slug, suite="basics", version=str(baseline.number), against=str(baseline.number))
    assert "no regression" in capsys.readouterr().out
    # Two eval runs of four cases each: the reuse started none.
    assert Run.objects.filter(sandbox__isnull=False).count() == 8
