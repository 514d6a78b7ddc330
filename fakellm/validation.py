"""Validation of whole script documents; see step_validation for steps."""

from __future__ import annotations

from fakellm.step_validation import FAULT_KINDS, Problems, check_step, is_amount, is_int
from fakellm.tokens import COUNTINGS

DEFAULTS = {
    "latency_ms": 0,
    "finish_field": "finish_reason",
    "omit_tool_call_ids": False,
    "stream_style": "standard",
    "stream_usage": True,
    "stream_chunk_delay_ms": 0,
    "token_counting": "chars",
    "token_scale": 1,
    "context_window": None,
    "context_error": "openai",
    "stream_tools_error": None,
    "hold_timeout_ms": 60000,
    "cache_min_tokens": 1024,
    "cache_step_tokens": 128,
}
CONTEXT_ERRORS = ("openai", "llamacpp")
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
    problems.amounts(value, ["latency_ms", "stream_chunk_delay_ms", "hold_timeout_ms"], "defaults")
    for key in ("omit_tool_call_ids", "stream_usage"):
        if not isinstance(value.get(key, False), bool):
            problems.fail(f"defaults.{key}", "must be a boolean")
    if value.get("finish_field", "finish_reason") not in FINISH_FIELDS:
        problems.fail("defaults.finish_field", f"must be one of {FINISH_FIELDS}")
    if value.get("stream_style", "standard") not in STREAM_STYLES:
        problems.fail("defaults.stream_style", f"must be one of {STREAM_STYLES}")
    if value.get("token_counting", "chars") not in COUNTINGS:
        problems.fail("defaults.token_counting", f"must be one of {COUNTINGS}")
    scale = value.get("token_scale", 1)
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0.1 <= scale <= 10:
        problems.fail("defaults.token_scale", "must be a number from 0.1 to 10")
    window = value.get("context_window")
    if window is not None and not (is_int(window) and window > 0):
        problems.fail("defaults.context_window", "must be a positive integer or null")
    if value.get("context_error", "openai") not in CONTEXT_ERRORS:
        problems.fail("defaults.context_error", f"must be one of {CONTEXT_ERRORS}")
    _check_stream_tools_error(value.get("stream_tools_error"), problems)
    for key in ("cache_min_tokens", "cache_step_tokens"):
        if not (is_int(value.get(key, 1)) and value.get(key, 1) >= 1):
            problems.fail(f"defaults.{key}", "must be a positive integer")


def _check_stream_tools_error(value, problems: Problems) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not isinstance(value.get("message"), str) or not value["message"]:
        return problems.fail("defaults.stream_tools_error", "must be null or an object with a non-empty 'message'")
    problems.keys(value, {"status", "message", "in_stream", "empty"}, "defaults.stream_tools_error")
    for key in ("in_stream", "empty"):
        if not isinstance(value.get(key, False), bool):
            problems.fail(f"defaults.stream_tools_error.{key}", "must be a boolean")
    if not (is_int(value.get("status", 500)) and 400 <= value.get("status", 500) <= 599):
        problems.fail("defaults.stream_tools_error.status", "must be an HTTP error status (400-599)")


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


def _check_needs_description(scenario: dict, path: str, problems: Problems) -> None:
    needs = scenario.get("needs_description")
    if (
        not isinstance(needs, dict)
        or not needs
        or not all(
            isinstance(words, list) and words and all(isinstance(w, str) and w for w in words)
            for words in needs.values()
        )
    ):
        problems.fail(f"{path}.needs_description", "must map tool names to non-empty lists of words")
    if "not_understood" not in scenario:
        return problems.fail(path, "'needs_description' needs a 'not_understood' step")
    check_step(scenario["not_understood"], f"{path}.not_understood", problems)


def _check_scenario(scenario, path: str, problems: Problems) -> None:
    if not problems.is_object(scenario, path):
        return
    problems.keys(scenario, {"match", "steps", "needs_description", "not_understood", "recall"}, path)
    problems.regex(scenario.get("match"), f"{path}.match")
    if "recall" in scenario:
        problems.regex(scenario["recall"], f"{path}.recall")
    if "needs_description" in scenario or "not_understood" in scenario:
        _check_needs_description(scenario, path, problems)
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
    problems.keys(script, {"defaults", "faults", "scenarios", "fallback", "memory_extraction"}, "script")
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
    if "memory_extraction" in script:
        check_step(script["memory_extraction"], "memory_extraction", problems)
    if problems.errors:
        raise ScriptError("; ".join(problems.errors))
