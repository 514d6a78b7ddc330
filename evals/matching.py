"""Expectation matchers: pure functions over what a run produced, and the checks that an
expectation an operator wrote is usable at all (a bad JSON Schema or regex is refused on save).

Everything matched here came from a model, so it is untrusted: patterns run with a time limit
(the `regex` engine's timeout) and on bounded text, so a pathological answer cannot hang a worker.
"""

import json

import regex
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

PATTERN_TIMEOUT_SECONDS = 1.0
# Answers and arguments longer than this are matched on their first part only.
MAX_MATCHED_CHARS = 100_000


class ExpectationInvalid(ValueError):
    """An expectation that cannot be evaluated: a bad pattern or schema, a wrong shape."""


def pattern_check(pattern: str) -> None:
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise ExpectationInvalid(f"invalid regular expression {pattern!r}: {exc}") from exc


def schema_check(schema) -> None:
    if not isinstance(schema, dict):
        raise ExpectationInvalid("a JSON Schema must be an object")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ExpectationInvalid(f"invalid JSON Schema: {exc.message}") from exc


def pattern_found(pattern: str, text: str) -> bool:
    """Whether the pattern occurs in the text; a match that takes too long counts as not found."""
    try:
        return regex.search(pattern, text[:MAX_MATCHED_CHARS], timeout=PATTERN_TIMEOUT_SECONDS) is not None
    except TimeoutError:
        return False


def schema_errors(schema: dict, value) -> list[str]:
    return [error.message for error in Draft202012Validator(schema).iter_errors(value)][:5]


def json_subset(expected, actual) -> bool:
    """Whether `actual` holds `expected`: objects by their keys (extra keys allowed, at every
    depth), lists element by element with the same length, anything else by equality."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and json_subset(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(json_subset(e, a) for e, a in zip(expected, actual, strict=True))
        )
    # 1 and True are equal in Python, not in JSON.
    return expected == actual and (type(expected) is type(actual) or {type(expected), type(actual)} <= {int, float})


def serialised(value) -> str:
    """The one text form arguments are matched in by pattern: sorted keys, no ASCII escapes."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def arguments_problem(expectation: dict, arguments) -> str | None:
    """Why the arguments do not meet the expected call's argument matchers; None if they do."""
    if "arguments" in expectation and not json_subset(expectation["arguments"], arguments):
        return f"arguments {serialised(arguments)} do not contain {serialised(expectation['arguments'])}"
    if "arguments_schema" in expectation:
        errors = schema_errors(expectation["arguments_schema"], arguments)
        if errors:
            return f"arguments fail the schema: {'; '.join(errors)}"
    pattern = expectation.get("arguments_pattern")
    if pattern is not None and not pattern_found(pattern, serialised(arguments)):
        return f"arguments {serialised(arguments)} do not match /{pattern}/"
    return None


EXPECTED_CALL_KEYS = {"name", "arguments", "arguments_schema", "arguments_pattern"}


def expected_calls_check(calls) -> None:
    """An expected-calls list: [{"name": …, optional "arguments" (a JSON subset),
    "arguments_schema", "arguments_pattern"}]."""
    if not isinstance(calls, list):
        raise ExpectationInvalid("expected tool calls must be a list")
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise ExpectationInvalid('each expected tool call is an object with a "name"')
        unknown = set(call) - EXPECTED_CALL_KEYS
        if unknown:
            raise ExpectationInvalid(f"unknown keys in an expected tool call: {', '.join(sorted(unknown))}")
        if "arguments_schema" in call:
            schema_check(call["arguments_schema"])
        if "arguments_pattern" in call:
            if not isinstance(call["arguments_pattern"], str):
                raise ExpectationInvalid("arguments_pattern must be a string")
            pattern_check(call["arguments_pattern"])
