"""The metrics function against a count by hand over a small table of results."""

import pytest

from evals.metrics import eval_metrics, percentile


def _result(case, repetition, passed, kinds, *, calls=0, valid=0, turns=1, tokens=100, cost="0.01", latency=100):
    return {
        "case": case,
        "repetition": repetition,
        "passed": passed,
        "checks": [{"kind": kind, "passed": ok, "reason": ""} for kind, ok in kinds],
        "tool_calls": calls,
        "valid_tool_calls": valid,
        "model_turns": turns,
        "total_tokens": tokens,
        "cost": cost,
        "latency_ms": latency,
    }


def test_metrics_equal_a_hand_count():
    results = [
        # Case 1 passes in both repetitions: one expected call met each time.
        _result(1, 1, True, [("tool_call", True)], calls=1, valid=1, turns=2, tokens=300, cost="0.03", latency=400),
        _result(1, 2, True, [("tool_call", True)], calls=2, valid=1, turns=3, tokens=500, cost="0.05", latency=600),
        # Case 2 expects no tool: it calls one in repetition 1, none in repetition 2.
        _result(2, 1, False, [("no_tool", False)], calls=1, valid=1, latency=100),
        _result(2, 2, True, [("no_tool", True)], latency=200),
        # Case 3: two expected calls, one met, in both repetitions; a forbidden tool never called.
        _result(
            3,
            1,
            False,
            [("tool_call", True), ("tool_call", False), ("forbidden_tool", True)],
            calls=1,
            valid=0,
            latency=300,
        ),
        _result(
            3,
            2,
            False,
            [("tool_call", False), ("tool_call", True), ("forbidden_tool", True)],
            calls=1,
            valid=1,
            latency=None,
        ),
    ]
    metrics = eval_metrics(results, repetitions=2)
    assert metrics["results"] == 6 and metrics["cases"] == 3
    assert metrics["tool_hit_rate"] == 4 / 6  # 2 (case 1) + 2 of 4 (case 3)
    assert metrics["argument_validity_rate"] == 4 / 6  # valid 1+1+1+0+1 of calls 1+2+1+1+1
    assert metrics["task_completion_rate"] == 3 / 6
    assert metrics["wrong_call_rate"] == 1 / 4  # cases 2 and 3 are guarded; case 2 rep 1 called one
    assert metrics["avg_model_turns"] == (2 + 3 + 1 + 1 + 1 + 1) / 6
    assert metrics["tokens_per_task"] == (300 + 500 + 100 * 4) / 6
    assert metrics["cost_per_task"] == pytest.approx((0.03 + 0.05 + 0.01 * 4) / 6)
    # Latencies known: 100 200 300 400 600 → p50 the 3rd, p95 the 5th.
    assert (metrics["latency_p50_ms"], metrics["latency_p95_ms"]) == (300, 600)
    assert metrics["pass_at_k"] == 2 / 3  # cases 1 and 2 passed at least once
    assert metrics["pass_all_k"] == 1 / 3
    # Pass rate per repetition: 1/3 then 2/3.
    assert (metrics["pass_rate_min"], metrics["pass_rate_max"]) == (1 / 3, 2 / 3)
    assert metrics["pass_rate_stdev"] == pytest.approx(1 / 6)


def test_rates_with_nothing_to_count_are_none():
    metrics = eval_metrics([_result(1, 1, True, [("finished", True)], latency=None)], repetitions=1)
    assert metrics["tool_hit_rate"] is None and metrics["wrong_call_rate"] is None
    assert metrics["argument_validity_rate"] is None and metrics["latency_p50_ms"] is None
    assert metrics["pass_at_k"] == 1.0


def test_percentile_nearest_rank():
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile(list(range(1, 21)), 95) == 19
    assert percentile([7], 95) == 7
    assert percentile([], 50) is None


def test_the_schema_valid_rate_counts_only_runs_held_to_a_schema():
    results = [
        _result(1, 1, True, [("finished", True), ("output_schema", True)]),
        _result(2, 1, False, [("finished", False), ("output_schema", False)]),
        _result(3, 1, True, [("finished", True), ("output_schema", True)]),
        # Ended on a limit, or its agent has no schema: no check, not counted.
        _result(4, 1, False, [("finished", False)]),
    ]
    assert eval_metrics(results, repetitions=1)["schema_valid_rate"] == 2 / 3
    assert eval_metrics(results[3:], repetitions=1)["schema_valid_rate"] is None
