"""Tolerant parsing and strict validation of tool-call arguments.

Models wrap JSON in prose or code fences now and then (seed 004 §4.2), so parsing forgives
what it safely can; validation forgives nothing, and every problem becomes a sentence the
model can act on (seed 003 §5.3) instead of an exception.
"""

import hashlib
import json
from dataclasses import dataclass, field

from platform_site.text import has_lone_surrogate
from tools.schemas import LinearValidator

# Real tool arguments nest a few levels; thousands (a model stuck repeating a bracket) would
# overflow the recursive code that stores, validates and prints them.
MAX_DEPTH = 32
TOO_DEEP = f"The arguments nest more than {MAX_DEPTH} levels deep. Send a flat JSON object."
LONE_SURROGATE = (
    "The arguments contain a broken Unicode escape (half of a surrogate pair such as \\ud83d). "
    "Send the characters themselves or complete pairs."
)


@dataclass
class ParsedArguments:
    arguments: dict | None
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.arguments is not None and not self.errors


def parse_arguments(raw) -> ParsedArguments:
    if raw is None or isinstance(raw, str):
        text = (raw or "").strip()
        if not text:
            return ParsedArguments({})
        try:
            value = json.loads(text)
        except RecursionError:
            return ParsedArguments(None, [TOO_DEEP])
        except ValueError:
            value = _first_json_object(text)
            if value is None:
                return ParsedArguments(
                    None, [f"The arguments are not valid JSON: {text[:200]!r}. Send one JSON object."]
                )
    else:
        value = raw
    if not isinstance(value, dict):
        return ParsedArguments(None, [f"The arguments must be a JSON object, not {type(value).__name__}."])
    if _deeper_than(value, MAX_DEPTH):
        return ParsedArguments(None, [TOO_DEEP])
    if has_lone_surrogate(value):
        # Unlike NUL (a character, stored as U+FFFD), a lone surrogate is broken text: the model
        # is asked to send it again rather than have its text silently altered.
        return ParsedArguments(None, [LONE_SURROGATE])
    return ParsedArguments(value)


def _deeper_than(value, limit: int) -> bool:
    """Whether containers nest more than `limit` levels; iterative, so no depth can overflow it."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                pending.append((child, depth + 1))
    return False


def _first_json_object(text: str) -> dict | None:
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except RecursionError:
            return None  # nothing that deep is a tool's arguments; do not try every brace of it
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def validate_arguments(schema: dict, arguments: dict) -> list[str]:
    errors = []
    properties = schema.get("properties") or {}
    if schema.get("additionalProperties", False) is False:
        unknown = [key for key in arguments if key not in properties]
        if unknown:
            allowed = ", ".join(properties) or "no arguments"
            errors.append(f"Unsupported argument(s) {', '.join(unknown)}; this tool accepts only: {allowed}.")
    for error in sorted(LinearValidator(schema).iter_errors(arguments), key=lambda e: list(e.path)):
        if error.validator == "additionalProperties":
            continue
        where = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "required":
            errors.append(f"{error.message}; provide it and call again.")
        elif where:
            errors.append(f"Argument {where!r}: {error.message}.")
        else:
            errors.append(f"{error.message}.")
    return errors


def contains_nul(value) -> bool:
    """Whether a JSON value holds U+0000 anywhere (keys too): PostgreSQL stores it in neither
    text nor jsonb, so such input must be refused before it reaches the database."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(contains_nul(key) or contains_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(contains_nul(item) for item in value)
    return False


def arguments_hash(arguments: dict) -> str:
    """SHA-256 of the canonical JSON of the arguments: what an approval is bound to."""
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
