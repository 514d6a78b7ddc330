"""Expectation matchers: pure functions over what a run produced, and the checks that an
expectation an operator wrote is usable at all (a bad JSON Schema or regex is refused on save).

Everything matched here came from a model, so it is untrusted: patterns run with a time limit
(the `regex` engine's timeout) and on bounded text, so a pathological answer cannot hang a worker.
"""

import json
from urllib.parse import unquote

import regex
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from tools.schemas import LinearValidator

PATTERN_TIMEOUT_SECONDS = 1.0
# Answers and arguments longer than this are matched on their first part only.
MAX_MATCHED_CHARS = 100_000


class ExpectationInvalid(ValueError):
    """An expectation that cannot be evaluated: a bad pattern or schema, a wrong shape."""


# The `regex` engine unrolls counted repetitions when it compiles: a{1000000000} (or
# ((a{1000}){1000}){1000}) holds the request that saves it for minutes. What the counts multiply
# to is bounded first; (a{1000}){100} compiles in 0.04 s.
MAX_EXPANDED_ATOMS = 100_000
MAX_PATTERN_CHARS = 5_000
_COUNT = regex.compile(r"\{(\d*)(?:,(\d*))?\}")


def _expanded_atoms(pattern: str) -> int:
    """About how many atoms the pattern is once its counted repetitions are unrolled: each
    group's weight times its count, nested groups multiplying. A character class is one atom."""
    weights, last, i = [0], 0, 0
    while i < len(pattern):
        char = pattern[i]
        count = _COUNT.match(pattern, i) if char == "{" else None
        if count and (count[1] or count[2]):
            repeat = max(int(count[1] or 0), int(count[2] or 0))
            weights[-1] += last * max(repeat - 1, 0)
            last *= repeat
            i = count.end()
            continue
        if char == "(":
            weights.append(0)
        elif char == ")" and len(weights) > 1:
            last = weights.pop()
            weights[-1] += last
        else:
            if char == "\\":
                i += 1
            elif char == "[":
                end = i + 1
                while end < len(pattern) and (pattern[end] != "]" or end == i + 1):
                    end += 2 if pattern[end] == "\\" else 1
                i = end
            last = 1
            weights[-1] += 1
        i += 1
    return sum(weights)


def pattern_check(pattern: str) -> None:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ExpectationInvalid(f"a regular expression here is at most {MAX_PATTERN_CHARS} characters")
    if _expanded_atoms(pattern) > MAX_EXPANDED_ATOMS:
        raise ExpectationInvalid(
            f"invalid regular expression {pattern[:100]!r}: its repetition counts unroll to more than "
            f"{MAX_EXPANDED_ATOMS} characters"
        )
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise ExpectationInvalid(f"invalid regular expression {pattern!r}: {exc}") from exc
    except RecursionError:
        raise ExpectationInvalid("invalid regular expression: its groups are nested too deeply") from None


def schema_check(schema) -> None:
    if not isinstance(schema, dict):
        raise ExpectationInvalid("a JSON Schema must be an object")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ExpectationInvalid(f"invalid JSON Schema: {exc.message}") from exc
    except RecursionError:
        raise ExpectationInvalid("invalid JSON Schema: it is nested too deeply") from None
    _references_check(schema)


# Keywords that send validation elsewhere by URI: only plain $ref within the schema is allowed.
_DYNAMIC_REFERENCES = ("$dynamicRef", "$recursiveRef")
# The cycle check compares every reference with every other: a bound keeps it quick.
MAX_REFERENCES = 500


def _references(node, path: tuple = ()):
    """(where, ref) for every "$ref" in the schema, `where` being the path of the object that holds
    it. Every object is looked at, data keywords (const, enum…) included: a string "$ref" there is
    refused too, which costs nothing real and keeps this walk free of keyword lists."""
    if isinstance(node, dict):
        for keyword in _DYNAMIC_REFERENCES:
            if keyword in node:
                raise ExpectationInvalid(f"{keyword} is not supported in an eval's JSON Schema")
        # A nested $id starts a resource of its own, against which "#/…" means something else.
        if path and "$id" in node:
            raise ExpectationInvalid("$id is supported only at the top of an eval's JSON Schema")
        if "$ref" in node:
            yield path, node["$ref"]
        for key, value in node.items():
            yield from _references(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _references(value, (*path, index))


def _pointer_target(schema: dict, ref) -> tuple:
    """The path a "#/…" JSON pointer names in the schema, or ExpectationInvalid."""
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        raise ExpectationInvalid(f"$ref {ref!r}: only references inside the schema (#/…) are supported")
    path, node = [], schema
    for token in ref[2:].split("/") if ref != "#" else []:
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            path.append(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            token = int(token)
            path.append(token)
        else:
            raise ExpectationInvalid(f"$ref {ref!r} points to nothing in the schema")
        node = node[token]
    if not isinstance(node, dict | bool):
        raise ExpectationInvalid(f"$ref {ref!r} points to something that is not a schema")
    return tuple(path)


def _references_check(schema: dict) -> None:
    """Refuse references that could send validation round in a circle: jsonschema follows them
    without a bound, and a worker scoring an answer would die on RecursionError (a `{"$ref": "#"}`
    is a valid schema that does exactly that). A reference is followed into the part of the
    schema it names; if any chain of references can come back to one it left from, the schema is
    recursive and refused, even when the data would end the recursion: an answer comes from a
    model and may nest as deep as it likes."""
    refs = list(_references(schema))
    if len(refs) > MAX_REFERENCES:
        raise ExpectationInvalid(f"a JSON Schema here holds at most {MAX_REFERENCES} $ref")
    targets = [(where, _pointer_target(schema, ref), ref) for where, ref in refs]
    # Following reference i leads to every reference held inside its target.
    leads_to = {
        i: [j for j, (where, _target, _ref) in enumerate(targets) if where[: len(target)] == target]
        for i, (_where, target, _ref) in enumerate(targets)
    }
    done: set[int] = set()
    for start in leads_to:
        if start in done:
            continue
        on_path: set[int] = set()
        stack = [(start, iter(leads_to[start]))]
        on_path.add(start)
        while stack:
            node, successors = stack[-1]
            following = next(successors, None)
            if following is None:
                stack.pop()
                on_path.discard(node)
                done.add(node)
            elif following in on_path:
                raise ExpectationInvalid(f"$ref {targets[following][2]!r} makes the schema recursive")
            elif following not in done:
                on_path.add(following)
                stack.append((following, iter(leads_to[following])))


def pattern_found(pattern: str, text: str) -> bool:
    """Whether the pattern occurs in the text; a match that takes too long counts as not found."""
    try:
        # concurrent: the interpreter lock is let go while it runs, so a slow pattern holds up
        # no other run of the worker.
        return (
            regex.search(pattern, text[:MAX_MATCHED_CHARS], timeout=PATTERN_TIMEOUT_SECONDS, concurrent=True)
            is not None
        )
    except TimeoutError:
        return False


def schema_errors(schema: dict, value) -> list[str]:
    # Schemas saved before recursive references were refused, and answers nested deeper than
    # Python recurses, fail the check instead of the worker that scores them.
    try:
        return [error.message for error in LinearValidator(schema).iter_errors(value)][:5]
    except RecursionError:
        return ["the schema or the value is nested too deeply to be checked"]
    except Unresolvable as exc:
        return [f"the schema has a reference that cannot be followed: {exc}"]


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
