"""JSON Schema validation of what a model produced (tool arguments, eval answers) in linear time.

jsonschema checks "pattern" and "patternProperties" with Python's `re`, a backtracking engine
that holds the interpreter lock while it runs: an operator's harmless-looking pattern such as
`^([a-z0-9]+\\.?)+@example\\.com$` takes exponential time on forty characters a model chose
(0.85 s at 24, hours at 40), and every run of the worker process stops meanwhile. A tool's
schema may also come from an MCP server, whose patterns nobody reviewed.

Here those keywords run their patterns on RE2, which reads the text once (as guardrail
patterns do, agents.guardrails). A pattern RE2 refuses (a lookaround, a backreference) runs on
the `regex` engine with a time limit, releasing the interpreter lock; one that runs out of time
counts as not matched, so the value is refused, never let through unchecked.

`unevaluatedProperties` still finds the keys that `patternProperties` evaluated with `re`: a
schema that combines the two, rare in tool schemas, keeps that cost.
"""

from functools import lru_cache

import re2
import regex
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

# A pattern RE2 cannot run gets this long per value on the backtracking engine.
FALLBACK_TIMEOUT_SECONDS = 0.1
# The same as a guardrail pattern's (agents.guardrails): a larger program is refused by RE2.
RE2_MAX_MEMORY = 8 << 20


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = RE2_MAX_MEMORY
    options.log_errors = False
    return options


@lru_cache(maxsize=256)
def _re2(pattern: str):
    """The pattern compiled by RE2, or None if RE2 refuses it."""
    try:
        return re2.compile(pattern, _options())
    except re2.error:
        return None


def pattern_search(pattern: str, text: str) -> bool:
    """Whether `pattern` occurs in `text`, in time linear in the text when RE2 can run it."""
    compiled = _re2(pattern)
    if compiled is not None:
        return compiled.search(text) is not None
    try:
        return regex.search(pattern, text, timeout=FALLBACK_TIMEOUT_SECONDS, concurrent=True) is not None
    except (TimeoutError, regex.error):
        return False


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not pattern_search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if pattern_search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance, schema) -> list:
    """The keys of `instance` that neither "properties" nor "patternProperties" names."""
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        key
        for key in instance
        if key not in properties and not any(pattern_search(pattern, key) for pattern in patterns)
    ]


def _additional_properties(validator, additional, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras, key=str))
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


LinearValidator = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)
