"""The expectation matchers and scoring, without a database."""

import pytest

from evals.matching import (
    ExpectationInvalid,
    arguments_problem,
    expected_calls_check,
    json_subset,
    pattern_check,
    pattern_found,
    schema_check,
)
from evals.scoring import Observation, score_run


@pytest.mark.parametrize(
    ("expected", "actual", "holds"),
    [
        ({"a": 1}, {"a": 1, "b": 2}, True),
        ({"a": {"b": "x"}}, {"a": {"b": "x", "c": 1}}, True),
        ({"a": 1}, {"a": 2}, False),
        ({"a": 1}, {}, False),
        ({"a": True}, {"a": 1}, False),  # JSON true is not 1
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2, "c": 3}]}, True),
        ({"a": [1]}, {"a": [1, 2]}, False),
        ({"a": 1}, None, False),
        ("x", "x", True),
    ],
)
def test_json_subset(expected, actual, holds):
    assert json_subset(expected, actual) is holds


def test_arguments_problem_by_subset_schema_and_pattern():
    arguments = {"city": "Paris", "nights": 3}
    assert arguments_problem({"name": "t", "arguments": {"city": "Paris"}}, arguments) is None
    assert "do not contain" in arguments_problem({"name": "t", "arguments": {"city": "Rome"}}, arguments)
    schema = {"type": "object", "properties": {"nights": {"type": "integer", "maximum": 2}}}
    assert "fail the schema" in arguments_problem({"name": "t", "arguments_schema": schema}, arguments)
    assert arguments_problem({"name": "t", "arguments_pattern": '"nights": 3'}, arguments) is None
    assert "do not match" in arguments_problem({"name": "t", "arguments_pattern": "Rome"}, arguments)


def test_a_pathological_pattern_times_out_as_not_found():
    assert pattern_found(r"(a+)+$", "a" * 40 + "b") is False


@pytest.mark.parametrize(
    "calls",
    [
        "nope",
        [{"arguments": {}}],
        [{"name": "t", "surprise": 1}],
        [{"name": "t", "arguments_schema": {"type": "nonsense"}}],
        [{"name": "t", "arguments_pattern": "("}],
        [{"name": "t", "arguments_pattern": 3}],
    ],
)
def test_bad_expected_calls_are_refused(calls):
    with pytest.raises(ExpectationInvalid):
        expected_calls_check(calls)


def test_bad_patterns_and_schemas_are_refused():
    with pytest.raises(ExpectationInvalid):
        pattern_check("[unclosed")
    with pytest.raises(ExpectationInvalid):
        schema_check({"type": 12})
    with pytest.raises(ExpectationInvalid):
        schema_check([])


def _kinds(checks):
    return [(c["kind"], c["passed"]) for c in checks]


def test_score_run_checks_each_expectation():
    observed = Observation(
        stop_reason="final_answer",
        answer='{"total": 3}',
        tool_calls=[
            {"name": "lookup", "arguments": {"id": 1}, "valid": True},
            {"name": "lookup", "arguments": {"id": 2}, "valid": True},
            {"name": "refund", "arguments": {}, "valid": True},
        ],
        model_turns=3,
        total_tokens=900,
    )
    expectations = {
        # One call meets one expectation: the third lookup is missing.
        "expected_tool_calls": [
            {"name": "lookup", "arguments": {"id": 2}},
            {"name": "lookup"},
            {"name": "lookup"},
        ],
        "forbidden_tools": ["refund", "delete"],
        "answer_contains": "total",
        "answer_pattern": r"\d+\}$",
        "answer_schema": {"type": "object", "required": ["total"]},
        "max_model_turns": 2,
        "max_tokens": 1000,
    }
    assert _kinds(score_run(expectations, observed)) == [
        ("finished", True),
        ("tool_call", True),
        ("tool_call", True),
        ("tool_call", False),
        ("forbidden_tool", False),
        ("forbidden_tool", True),
        ("answer_contains", True),
        ("answer_pattern", True),
        ("answer_schema", True),
        ("max_model_turns", False),
        ("max_tokens", True),
    ]


def test_score_run_no_tool_and_a_non_json_answer():
    observed = Observation(
        stop_reason="max_iterations", answer="not json", tool_calls=[{"name": "x", "arguments": {}, "valid": False}]
    )
    checks = score_run({"expect_no_tool": True, "answer_schema": {"type": "object"}}, observed)
    assert _kinds(checks) == [("finished", False), ("no_tool", False), ("answer_schema", False)]
    assert checks[1]["reason"] == "called x"
    assert checks[2]["reason"] == "the run ended on max_iterations, not with an answer"
    answered = score_run({"answer_schema": {"type": "object"}}, Observation(stop_reason="final_answer", answer="x"))
    assert "not JSON" in answered[1]["reason"]
