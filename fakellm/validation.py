"""Validation of whole script documents; see step_validation for steps."""

from __future__ import annotations

from fakellm.step_validation import FAULT_KINDS, Problems, check_step, is_amount, is_int

DEFAULTS = {
    "latency_ms": 0,
    "finish_field": "finish_reason",
    "omit_tool_call_ids": False,
    "stream_style": "standard",
    "stream_usage": True,
    "stream_chunk_delay_ms": 0,
}
FAULT_DEFAULTS = {"rate": {}, "seed": 1, "retry_after": 1, "timeout_ms": 30000}
FINISH_FIELDS = ("finish_reason", "stop_reason", "both")
STREAM_STYLES = ("standard", "repeat_id_name", "single_chunk_args")


class ScriptError(ValueError):
    pass


def _is_status(key: str) -> bool:
    return key.isdigit() and 400 <= int(key) <= 599


def _check_defaults(value, problems: Problems) -> None:
    if not problems.is_object(value, "defaults"):
        return
    problems.keys(value, DEFAULTS, "defaults")
    problems.amounts(value, ["latency_ms", "stream_chunk_delay_ms"], "defaults")
    for key in ("omit_tool_call_ids", "stream_usage"):
        if not isinstance(value.get(key, False), bool):
            problems.fail(f"defaults.{key}", "must be a boolean")
    if value.get("finish_field", "finish_reason") not in FINISH_FIELDS:
        problems.fail("defaults.finish_field", f"must be one of {FINISH_FIELDS}")
    if value.get("stream_style", "standard") not in STREAM_STYLES:
        problems.fail("defaults.stream_style", f"must be one of {STREAM_STYLES}")


def _check_faults(value, problems: Problems) -> None:
    if not problems.is_object(value, "faults"):
        return
    problems.keys(value, FAULT_DEFAULTS, "faults")
    problems.amounts(value, ["retry_after", "timeout_ms"], "faults")
    if not is_int(value.get("seed", 1)):
        problems.fail("faults.seed", "must be an integer")
    rate = value.get("rate", {})
    if not problems.is_object(rate, "faults.rate"):
        return
    for key, probability in rate.items():
        if key not in FAULT_KINDS and not _is_status(key):
            problems.fail("faults.rate", f"unknown fault {key!r}")
        if not is_amount(probability) or probability > 1:
            problems.fail(f"faults.rate.{key}", "must be a probability between 0 and 1")
    if all(is_amount(p) for p in rate.values()) and sum(rate.values()) > 1:
        problems.fail("faults.rate", "probabilities must sum to at most 1")


def _check_scenario(scenario, path: str, problems: Problems) -> None:
    if not problems.is_object(scenario, path):
        return
    problems.keys(scenario, {"match", "steps"}, path)
    problems.regex(scenario.get("match"), f"{path}.match")
    steps = scenario.get("steps")
    if not isinstance(steps, list) or not steps:
        return problems.fail(f"{path}.steps", "must be a non-empty list")
    for i, step in enumerate(steps):
        check_step(step, f"{path}.steps[{i}]", problems)


def validate_script(script) -> None:
    """Raise ScriptError listing every problem found in a script document."""
    if not isinstance(script, dict):
        raise ScriptError("script must be a JSON object")
    problems = Problems()
    problems.keys(script, {"defaults", "faults", "scenarios", "fallback"}, "script")
    _check_defaults(script.get("defaults", {}), problems)
    _check_faults(script.get("faults", {}), problems)
    scenarios = script.get("scenarios", [])
    if isinstance(scenarios, list):
        for i, scenario in enumerate(scenarios):
            _check_scenario(scenario, f"scenarios[{i}]", problems)
    else:
        problems.fail("scenarios", "must be a list")
    if "fallback" in script:
        check_step(script["fallback"], "fallback", problems)
    if problems.errors:
        raise ScriptError("; ".join(problems.errors))
