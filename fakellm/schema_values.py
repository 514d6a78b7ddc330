"""Values that fit a JSON Schema: the arguments the generic mode sends to the tools it is offered.

The values are meant to exercise a tool, not to fuzz it: readable words, round numbers, dates
near today's, the schema's own examples and enums. They are deterministic for a given random
generator. What is cheap to honour is honoured while drawing (types, required and optional
properties, enums and consts, formats, patterns, lengths, bounds, multiples, item counts,
uniqueness, local `$ref`s, `allOf` merged, one branch of `anyOf` / `oneOf`); what is not (`not`,
`if`/`then`, a `oneOf` whose branches overlap) is left to the check: every candidate is validated
with jsonschema and drawn again when it does not fit.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import math
import random
import re
import uuid

from jsonschema.exceptions import SchemaError
from jsonschema.validators import Draft202012Validator, validator_for
from rstr.xeger import Xeger

WORDS = (
    "amber",
    "birch",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "grove",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lumen",
    "maple",
    "nectar",
    "orbit",
    "pebble",
    "quartz",
    "river",
    "sierra",
    "tundra",
)
# Recursive schemas (a tree of nodes) stop growing here: deeper, only what is required.
MAX_DEPTH = 6
ATTEMPTS = 25
# Unbounded repeats in a pattern (`+`, `*`, `{2,}`) draw at most this many more than their minimum.
REPEAT_SPAN = 6
# A schema may ask for more than is worth building (minLength 10**9): beyond these sizes the draw
# does not try, and the check reports the value as not fitting.
MAX_TEXT = 10_000
MAX_ITEMS = 1_000
OPTIONAL = ("some", "all", "none")
# Dates are drawn around a fixed day, so a request gets the same arguments tomorrow.
BASE_DAY = dt.date(2026, 3, 1)


class _ShortXeger(Xeger):
    """rstr's pattern sampler with short repeats: `\\w+` gives a word, not a hundred characters."""

    def _handle_repeat(self, start_range: int, end_range: int, value) -> str:
        if start_range > MAX_TEXT:
            raise ValueError("the pattern repeats more than is worth building")
        return super()._handle_repeat(start_range, min(end_range, start_range + REPEAT_SPAN), value)


def _checker(schema) -> Draft202012Validator | None:
    """A validator for the schema (its own draft, formats checked), or None when the schema is
    not one jsonschema accepts: then candidates go out unchecked."""
    if not isinstance(schema, (dict, bool)):
        return None
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError:
        return None
    # The draft's own format checker: a bare FormatChecker mixes the drafts' definitions of `time`.
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _fits(checker, value) -> bool:
    try:
        return checker.is_valid(value)
    except Exception:  # noqa: BLE001 - a remote $ref or a pattern re cannot compile: unknowable
        return True


def schema_value(schema, rng: random.Random, *, optional: str = "some", root_type: str | None = None):
    """A value valid against `schema`; when no draw fits in ATTEMPTS tries (a schema nothing
    satisfies, or one this generator cannot aim at), the last candidate, so the caller's own
    validation reports what is wrong. `optional` says which optional properties are filled:
    some (a seeded half), all or none. `root_type` is the type assumed when the schema names
    none (a tool's parameters are an object)."""
    checker = _checker(schema)
    draw = _Draw(schema, rng, optional)
    candidate = None
    for _ in range(ATTEMPTS):
        try:
            candidate = draw.value(schema, name="", depth=0, default_type=root_type)
        except OverflowError:  # bounds beyond what a float holds (minimum: 10**400)
            continue
        if checker is None or _fits(checker, candidate):
            return candidate
    return candidate


def tool_arguments(schema, rng: random.Random, *, optional: str = "some") -> dict:
    """Arguments for a tool whose parameters are `schema`: always a JSON object."""
    value = schema_value(schema, rng, optional=optional, root_type="object")
    return value if isinstance(value, dict) else {}


def _merge(a: dict, b: dict) -> dict:
    """The two schemas' keywords as one (for `allOf`): properties merged, required united,
    the tighter of two bounds; for anything else the later one wins and the check decides."""
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
        elif key == "properties" and isinstance(out[key], dict) and isinstance(value, dict):
            merged = dict(out[key])
            for name, sub in value.items():
                both = isinstance(merged.get(name), dict) and isinstance(sub, dict)
                merged[name] = _merge(merged[name], sub) if both else sub
            out[key] = merged
        elif key == "required" and isinstance(out[key], list) and isinstance(value, list):
            out[key] = list(dict.fromkeys([*out[key], *value]))
        elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties") and _numbers(
            out[key], value
        ):
            out[key] = max(out[key], value)
        elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties") and _numbers(
            out[key], value
        ):
            out[key] = min(out[key], value)
        elif key == "type":
            common = [t for t in _as_list(out[key]) if t in _as_list(value)]
            out[key] = common or value
        else:
            out[key] = value
    return out


def _numbers(*values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _unique_key(value) -> str:
    return json.dumps(value, sort_keys=True)


class _Draw:
    def __init__(self, root, rng: random.Random, optional: str):
        self.root = root
        self.rng = rng
        self.optional = optional
        self.xeger = _ShortXeger(rng)

    # --- schema plumbing ------------------------------------------------------------------

    def _resolve(self, ref: str):
        """A local reference (`#`, `#/$defs/name`, `#/definitions/name`); anything else is
        unknown here and allows any value."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            return {}
        target = self.root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return {}
        return target

    def _flatten(self, schema: dict) -> dict:
        """The schema with its `$ref`, `allOf` and one `anyOf` / `oneOf` branch folded in."""
        for _ in range(MAX_DEPTH):
            if "$ref" in schema:
                target = self._resolve(schema["$ref"])
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = _merge(target, rest) if isinstance(target, dict) else rest
                continue
            if isinstance(schema.get("allOf"), list):
                merged = {k: v for k, v in schema.items() if k != "allOf"}
                for part in schema["allOf"]:
                    if isinstance(part, dict):
                        merged = _merge(merged, self._flatten(part))
                schema = merged
                continue
            for key in ("anyOf", "oneOf"):
                branches = [b for b in schema.get(key) or [] if isinstance(b, dict)] if key in schema else []
                if branches:
                    rest = {k: v for k, v in schema.items() if k != key}
                    schema = _merge(rest, self._flatten(self.rng.choice(branches)))
                    break
            else:
                return schema
        return schema

    def _type(self, schema: dict, default_type: str | None) -> str:
        declared = schema.get("type")
        if isinstance(declared, list):
            # A nullable field is more useful filled; null is drawn now and then.
            real = [t for t in declared if isinstance(t, str) and t != "null"]
            if real and (len(real) == len(declared) or self.rng.random() < 0.85):
                return self.rng.choice(real)
            return "null" if "null" in declared else "string"
        if isinstance(declared, str):
            return declared
        keys = set(schema)
        if keys & {"properties", "required", "additionalProperties", "minProperties", "patternProperties"}:
            return "object"
        if keys & {"items", "prefixItems", "minItems", "maxItems", "contains", "uniqueItems"}:
            return "array"
        if keys & {"minLength", "maxLength", "pattern", "format"}:
            return "string"
        if keys & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}:
            return "number"
        return default_type or "string"

    # --- values ---------------------------------------------------------------------------

    def value(self, schema, *, name: str, depth: int, default_type: str | None = None):
        if depth > 2 * MAX_DEPTH:
            return None  # a required property that contains itself: no finite value fits
        if schema is True or not isinstance(schema, dict):
            schema = {}
        schema = self._flatten(schema)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return copy.deepcopy(self.rng.choice(schema["enum"]))
        examples = schema.get("examples")
        if isinstance(examples, list) and examples and self.rng.random() < 0.5:
            return copy.deepcopy(self.rng.choice(examples))
        kind = self._type(schema, default_type)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, name, depth)
        if kind == "integer":
            return self._integer(schema)
        if kind == "number":
            return self._number(schema)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        return self._string(schema, name)

    def _wants_optional(self) -> bool:
        return self.optional == "all" or (self.optional == "some" and self.rng.random() < 0.5)

    def _object(self, schema: dict, depth: int) -> dict:
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = {r for r in schema.get("required") or [] if isinstance(r, str)}
        extra = schema.get("additionalProperties", {})
        deep = depth >= MAX_DEPTH
        chosen = [p for p in properties if p in required or (not deep and self._wants_optional())]
        chosen += sorted(required - set(properties))
        dependent = schema.get("dependentRequired") if isinstance(schema.get("dependentRequired"), dict) else {}
        for key in list(chosen):
            chosen += [d for d in dependent.get(key) or [] if isinstance(d, str) and d not in chosen]
        low = schema.get("minProperties") if isinstance(schema.get("minProperties"), int) else 0
        for key in properties:
            if len(chosen) >= low:
                break
            if key not in chosen:
                chosen.append(key)
        high = schema.get("maxProperties")
        if isinstance(high, int):
            while len(chosen) > high and any(k not in required for k in chosen):
                chosen.remove(next(k for k in reversed(chosen) if k not in required))
        result = {}
        for key in chosen:
            sub = properties.get(key, extra if isinstance(extra, dict) else {})
            result[key] = self.value(sub, name=key, depth=depth + 1)
        # Still short of minProperties: extra keys, where the schema allows them.
        words = iter(WORDS)
        while len(result) < low and extra is not False:
            key = next(words, None)
            if key is None:
                break
            if key not in result:
                result[key] = self.value(extra if isinstance(extra, dict) else {}, name=key, depth=depth + 1)
        return result

    def _array(self, schema: dict, name: str, depth: int) -> list:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # drafts before 2020-12 spell a tuple this way
            prefix, items = items, schema.get("additionalItems", {})
        prefix = prefix if isinstance(prefix, list) else []
        low = schema.get("minItems") if isinstance(schema.get("minItems"), int) else 0
        high = schema.get("maxItems") if isinstance(schema.get("maxItems"), int) else None
        if items is False:
            high = len(prefix) if high is None else min(high, len(prefix))
        if depth >= MAX_DEPTH:
            count = low
        else:
            top = low + 2 if high is None else min(high, max(low, 1) + 2)
            count = self.rng.randint(min(max(low, 1), top), top) if top >= low else low
        count = min(count, MAX_ITEMS)
        singular = name[:-1] if name.endswith("s") and len(name) > 1 else name
        result, seen = [], set()
        for index in range(count):
            sub = prefix[index] if index < len(prefix) else items
            for _ in range(8):
                element = self.value(sub, name=singular, depth=depth + 1)
                if not schema.get("uniqueItems") or _unique_key(element) not in seen:
                    break
            if schema.get("uniqueItems") and _unique_key(element) in seen:
                if len(result) >= low:
                    break  # the item schema has run out of distinct values
            seen.add(_unique_key(element))
            result.append(element)
        contains = schema.get("contains")
        if isinstance(contains, dict) and (high is None or high > 0):
            wanted = schema.get("minContains") if isinstance(schema.get("minContains"), int) else 1
            extra = [self.value(contains, name=singular, depth=depth + 1) for _ in range(max(wanted, 1))]
            result = (result + extra)[-high:] if high else result + extra
        return result

    def _bounds(self, schema: dict) -> tuple[float | None, bool, float | None, bool]:
        low, high = schema.get("minimum"), schema.get("maximum")
        low_open = high_open = False
        ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if ex_low is True:  # draft 4: a flag on minimum
            low_open = low is not None
        elif _numbers(ex_low) and (low is None or ex_low >= low):
            low, low_open = ex_low, True
        if ex_high is True:
            high_open = high is not None
        elif _numbers(ex_high) and (high is None or ex_high <= high):
            high, high_open = ex_high, True
        low = low if _numbers(low) else None
        high = high if _numbers(high) else None
        return low, low_open, high, high_open

    def _integer(self, schema: dict) -> int:
        low, low_open, high, high_open = self._bounds(schema)
        lo = None if low is None else (math.floor(low) + 1 if low_open else math.ceil(low))
        hi = None if high is None else (math.ceil(high) - 1 if high_open else math.floor(high))
        if lo is None and hi is None:
            lo, hi = 1, 100
        elif hi is None:
            hi = lo + 100
        elif lo is None:
            lo = 1 if hi >= 1 else hi - 100
        if lo > hi:
            return lo
        step = schema.get("multipleOf")
        if _numbers(step) and step > 0 and float(step).is_integer():
            step = int(step)
            first, last = -(-lo // step), hi // step
            if first <= last:
                return self.rng.randint(first, last) * step
        return self.rng.randint(lo, hi)

    def _number(self, schema: dict) -> float | int:
        low, low_open, high, high_open = self._bounds(schema)
        if low is None and high is None:
            low, high = 0, 100
        elif high is None:
            high = low + 100
        elif low is None:
            low = 0 if high > 0 else high - 100
        step = schema.get("multipleOf")
        if _numbers(step) and step > 0 and math.isfinite(low / step) and math.isfinite(high / step):
            first, last = math.ceil(low / step), math.floor(high / step)
            first += 1 if low_open and first * step <= low else 0
            last -= 1 if high_open and last * step >= high else 0
            if first <= last:
                value = self.rng.randint(first, last) * step
                if isinstance(step, int):
                    return value
                # Rounded to the step's own decimals: 3 * 0.1 is 0.30000000000000004.
                return round(value, max(0, -math.floor(math.log10(step))) + 2)
        value = round(self.rng.uniform(low, high), 2)
        if (low_open and value <= low) or value < low:
            value = low + (high - low) / 2
        if (high_open and value >= high) or value > high:
            value = low + (high - low) / 2
        return value

    def _words(self, name: str, count: int = 1) -> str:
        picked = " ".join(self.rng.choice(WORDS) for _ in range(count))
        label = re.sub(r"[_\-.]+", " ", name).strip()
        return f"{picked} {label}" if label else picked

    def _string(self, schema: dict, name: str) -> str:
        pattern = schema.get("pattern")
        text = None
        if isinstance(pattern, str):
            try:
                text = self.xeger.xeger(pattern)
            except Exception:  # noqa: BLE001 - a pattern Python's re cannot read (\p{L}): the check decides
                text = None
        if text is None:
            make = _FORMATS.get(schema.get("format"))
            text = make(self) if make else self._words(name)
        low = schema.get("minLength") if isinstance(schema.get("minLength"), int) else 0
        high = schema.get("maxLength") if isinstance(schema.get("maxLength"), int) else None
        while len(text) < min(low, MAX_TEXT):
            text += " " + self.rng.choice(WORDS)
        if high is not None and len(text) > high:
            text = text[:high].rstrip() if high else ""
            text = text.ljust(min(low, high), "x")
        return text

    # --- formats --------------------------------------------------------------------------

    def day(self) -> dt.date:
        return BASE_DAY + dt.timedelta(days=self.rng.randint(0, 30))

    def clock(self) -> str:
        return f"{self.rng.randint(8, 19):02d}:{self.rng.choice((0, 15, 30, 45)):02d}:00"

    def word(self) -> str:
        return self.rng.choice(WORDS)


_FORMATS = {
    "date": lambda d: d.day().isoformat(),
    "date-time": lambda d: f"{d.day().isoformat()}T{d.clock()}Z",
    "time": lambda d: f"{d.clock()}Z",
    "duration": lambda d: f"PT{d.rng.choice((5, 15, 30, 45, 90))}M",
    "email": lambda d: f"{d.word()}@example.com",
    "idn-email": lambda d: f"{d.word()}@example.com",
    "hostname": lambda d: f"{d.word()}.example.com",
    "idn-hostname": lambda d: f"{d.word()}.example.com",
    "ipv4": lambda d: f"192.0.2.{d.rng.randint(1, 254)}",
    "ipv6": lambda d: f"2001:db8::{d.rng.randint(1, 0xFFFF):x}",
    "uri": lambda d: f"https://example.com/{d.word()}",
    "iri": lambda d: f"https://example.com/{d.word()}",
    "url": lambda d: f"https://example.com/{d.word()}",
    "uri-reference": lambda d: f"/{d.word()}",
    "iri-reference": lambda d: f"/{d.word()}",
    "uri-template": lambda d: f"https://example.com/{d.word()}/{{id}}",
    "uuid": lambda d: str(uuid.UUID(int=d.rng.getrandbits(128), version=4)),
    "json-pointer": lambda d: f"/{d.word()}",
    "relative-json-pointer": lambda d: "0",
    "regex": lambda d: f"^{d.word()}$",
    "byte": lambda d: base64.b64encode(d.word().encode()).decode(),
    "password": lambda d: f"{d.word()}-{d.rng.randint(1000, 9999)}",
}
