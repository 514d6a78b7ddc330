"""The comparison: which differences are regressions, and that they come first; the command's
bad inputs."""

import pytest

from evals.compare import Thresholds, case_rows, has_regression, metric_rows

BASE = {
    "task_completion_rate": 0.8,
    "tool_hit_rate": 0.9,
    "wrong_call_rate": 0.1,
    "tokens_per_task": 1000.0,
    "latency_p95_ms": 2000,
    "cost_per_task": None,
}

DEFAULTS = Thresholds()


def _regressions(candidate, thresholds=DEFAULTS):
    return [row.name for row in metric_rows(BASE, {**BASE, **candidate}, thresholds) if row.regression]


def test_within_the_thresholds_is_no_regression():
    assert _regressions({"task_completion_rate": 0.76, "wrong_call_rate": 0.14, "tokens_per_task": 1240.0}) == []


def test_beyond_the_thresholds_is_a_regression_listed_first():
    candidate = {"task_completion_rate": 0.7, "wrong_call_rate": 0.2, "tokens_per_task": 1300.0, "cost_per_task": 1.0}
    rows = metric_rows(BASE, {**BASE, **candidate}, Thresholds())
    assert [row.name for row in rows[:3]] == ["task_completion_rate", "wrong_call_rate", "tokens_per_task"]
    assert all(row.regression for row in rows[:3]) and not any(row.regression for row in rows[3:])
    assert rows[0].delta == pytest.approx(-0.1)
    # A metric missing on one side (no baseline cost) is shown, never a regression.
    assert not next(row for row in rows if row.name == "cost_per_task").regression


def test_thresholds_are_settable():
    assert _regressions({"task_completion_rate": 0.7}, Thresholds(max_rate_drop=0.2)) == []
    assert _regressions({"latency_p95_ms": 2100}, Thresholds(max_latency_increase=0.01)) == ["latency_p95_ms"]


def test_latency_is_not_a_cost():
    # Two eval runs of one version on a busy machine: 60 % slower, same tokens and cost.
    assert _regressions({"latency_p95_ms": 3200}) == []
    # The cost threshold leaves latency alone, however tight it is.
    assert _regressions({"latency_p95_ms": 3200}, Thresholds(max_cost_increase=0.01)) == []
    assert _regressions({"tokens_per_task": 1011.0}, Thresholds(max_cost_increase=0.01)) == ["tokens_per_task"]
    # Beyond its own threshold (100 % by default), latency is a regression.
    assert _regressions({"latency_p95_ms": 4100}) == ["latency_p95_ms"]


def test_a_case_that_stopped_passing_is_a_regression():
    base = [
        {"case__name": "a", "passed": True},
        {"case__name": "b", "passed": True},
        {"case__name": "b", "passed": True},
    ]
    cand = [
        {"case__name": "a", "passed": True},
        {"case__name": "b", "passed": True},
        {"case__name": "b", "passed": False},
    ]
    rows = case_rows(base, cand, Thresholds())
    assert [(row.name, row.baseline, row.candidate, row.regression) for row in rows] == [
        ("b", 1.0, 0.5, True),
        ("a", 1.0, 1.0, False),
    ]
    assert has_regression(rows) and not has_regression(rows[1:])
