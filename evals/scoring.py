"""Scoring one run of one case: a pure function from the case's expectations and what the run
did (its observation, read from the ledger by selectors.run_observation) to a list of checks,
each {"kind", "passed", "reason"}. The case passes when every check passes."""

from dataclasses import dataclass, field

from evals.matching import arguments_problem, pattern_found, schema_errors, serialised
from platform_site.json_input import json_loads_checked


@dataclass
class Observation:
    stop_reason: str
    answer: str
    # In the order the model asked: {"name", "arguments", "valid"} (valid: parsed and matched the tool's schema).
    tool_calls: list[dict] = field(default_factory=list)
    model_turns: int = 0
    total_tokens: int = 0
    # The statements of the long-term memories the run was shown, most relevant first.
    memories_shown: list[str] = field(default_factory=list)


def expectations_of(case) -> dict:
    """A case's expectations as plain data (the JSONL form uses the same keys)."""
    return {
        "expected_tool_calls": case.expected_tool_calls,
        "forbidden_tools": case.forbidden_tools,
        "expect_no_tool": case.expect_no_tool,
        "answer_contains": case.answer_contains,
        "answer_equals": case.answer_equals,
        "answer_pattern": case.answer_pattern,
        "answer_schema": case.answer_schema,
        "max_model_turns": case.max_model_turns,
        "max_tokens": case.max_tokens,
        "remembered": case.remembered,
        "forgotten": case.forgotten,
    }


FINAL_ANSWER = "final_answer"
ANSWER_KINDS = ("answer_equals", "answer_contains", "answer_pattern", "answer_schema")


def _check(kind: str, passed: bool, reason: str) -> dict:
    return {"kind": kind, "passed": passed, "reason": reason}


def unanswered_check(kind: str, stop_reason: str) -> dict:
    """The failed answer check of a run that ended on a limit or an error: its last message is
    the platform's own ("I stopped here: …"), not the agent's answer, so nothing is matched
    against it and no judge is asked about it."""
    return _check(kind, False, f"the run ended on {stop_reason}, not with an answer")


SCHEMA_INVALID = "schema_invalid"


def output_schema_check(*, stop_reason: str, repairs: int, error: str) -> dict | None:
    """Whether the answer of a run held to an output schema (engine.answer_schema) matched it,
    after `repairs` repair turns: the schema valid rate counts these. None for a run that ended
    on something else (a limit, an error): no answer was held to the schema."""
    if stop_reason == FINAL_ANSWER:
        after = f" after {repairs} repair turn{'s' if repairs != 1 else ''}" if repairs else ""
        return _check("output_schema", True, f"the answer matched the output schema{after}")
    if stop_reason == SCHEMA_INVALID:
        return _check("output_schema", False, error or "the answer never matched the output schema")
    return None


def _expected_call_checks(expected: list[dict], calls: list[dict]) -> list[dict]:
    """Each expected call is met by its own call of the run (one call meets one expectation)."""
    used: set[int] = set()
    checks = []
    for expectation in expected:
        name = expectation["name"]
        problems = []
        for index, call in enumerate(calls):
            if index in used or call["name"] != name:
                continue
            problem = arguments_problem(expectation, call["arguments"])
            if problem is None:
                used.add(index)
                break
            problems.append(problem)
        else:
            reason = "; ".join(problems) if problems else f"{name} was not called"
            checks.append(_check("tool_call", False, f"{name}: {reason}"))
            continue
        checks.append(_check("tool_call", True, f"{name} called with {serialised(calls[index]['arguments'])}"))
    return checks


def _answer_json(answer: str):
    # Parsed as input from outside is: an answer nested thousands deep is "not JSON", not a
    # RecursionError in the worker that scores it.
    try:
        return json_loads_checked(answer), None
    except ValueError as exc:
        return None, f"the answer is not JSON: {exc}"


def _preview(text: str, limit: int = 80) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _answer_checks(expectations: dict, answer: str) -> list[dict]:
    checks = []
    if expectations.get("answer_equals"):
        same = answer.strip() == expectations["answer_equals"].strip()
        reason = "the same answer" if same else f"a different answer from {_preview(expectations['answer_equals'])}"
        checks.append(_check("answer_equals", same, reason))
    if expectations.get("answer_contains"):
        wanted = expectations["answer_contains"]
        found = wanted in answer
        checks.append(_check("answer_contains", found, f"{'contains' if found else 'lacks'} {wanted!r}"))
    if expectations.get("answer_pattern"):
        pattern = expectations["answer_pattern"]
        found = pattern_found(pattern, answer)
        checks.append(_check("answer_pattern", found, f"{'matches' if found else 'does not match'} /{pattern}/"))
    if expectations.get("answer_schema") is not None:
        value, problem = _answer_json(answer)
        if problem is None:
            errors = schema_errors(expectations["answer_schema"], value)
            problem = "; ".join(errors) if errors else None
        checks.append(_check("answer_schema", problem is None, problem or "matches the schema"))
    return checks


def _expects_answer(expectations: dict, kind: str) -> bool:
    value = expectations.get(kind)
    return value is not None if kind == "answer_schema" else bool(value)


def _memory_checks(expectations: dict, observed: Observation) -> list[dict]:
    """What the run recalled of the end user's earlier conversations: a remembered text is in a
    memory it was shown; a forgotten one is in none, and not in its answer either."""
    checks = []
    for text in expectations.get("remembered") or []:
        found = any(text in statement for statement in observed.memories_shown)
        checks.append(_check("remembered", found, f"{text!r} {'was' if found else 'was not'} in a memory shown"))
    for text in expectations.get("forgotten") or []:
        shown = any(text in statement for statement in observed.memories_shown)
        said = text in observed.answer
        where = " and ".join(w for w, found in (("in a memory shown", shown), ("in the answer", said)) if found)
        reason = f"{text!r} was {where}" if where else f"{text!r} did not come back"
        checks.append(_check("forgotten", not where, reason))
    return checks


def score_run(expectations: dict, observed: Observation) -> list[dict]:
    finished = observed.stop_reason == FINAL_ANSWER
    checks = [
        _check("finished", finished, "answered" if finished else f"ended without an answer ({observed.stop_reason})")
    ]
    names = [call["name"] for call in observed.tool_calls]
    checks += _expected_call_checks(expectations.get("expected_tool_calls") or [], observed.tool_calls)
    for name in expectations.get("forbidden_tools") or []:
        count = names.count(name)
        checks.append(_check("forbidden_tool", count == 0, f"{name} called {count} times"))
    if expectations.get("expect_no_tool"):
        checks.append(_check("no_tool", not names, f"called {', '.join(names)}" if names else "no tool called"))
    if finished:
        checks += _answer_checks(expectations, observed.answer)
    else:
        checks += [
            unanswered_check(kind, observed.stop_reason) for kind in ANSWER_KINDS if _expects_answer(expectations, kind)
        ]
    checks += _memory_checks(expectations, observed)
    if expectations.get("max_model_turns") is not None:
        limit = expectations["max_model_turns"]
        checks.append(
            _check("max_model_turns", observed.model_turns <= limit, f"{observed.model_turns} of at most {limit}")
        )
    if expectations.get("max_tokens") is not None:
        limit = expectations["max_tokens"]
        used = observed.total_tokens
        checks.append(_check("max_tokens", used <= limit, f"{used} of at most {limit}"))
    return checks
