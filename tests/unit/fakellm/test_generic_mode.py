"""The fake server's generic mode: it calls the tools a request offers, with arguments drawn from
their schemas, and answers from what they returned. No Django involved."""

from __future__ import annotations

import json
import random

import pytest
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from fakellm.schema_values import schema_value, tool_arguments

BOOKING = {
    "type": "object",
    "properties": {
        "guest": {"type": "string", "minLength": 3, "maxLength": 40},
        "email": {"type": "string", "format": "email"},
        "arrival": {"type": "string", "format": "date"},
        "nights": {"type": "integer", "minimum": 1, "maximum": 14},
        "budget": {"type": "number", "exclusiveMinimum": 0, "maximum": 500, "multipleOf": 0.5},
        "breakfast": {"type": "boolean"},
        "room": {"enum": ["single", "double", "suite"]},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
        "extras": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3, "uniqueItems": True},
        "contact": {
            "type": "object",
            "properties": {
                "phone": {"type": "string", "pattern": "^\\+86 \\d{11}$"},
                "note": {"type": ["string", "null"]},
            },
            "required": ["phone"],
            "additionalProperties": False,
        },
    },
    "required": ["guest", "arrival", "nights", "room", "code", "contact"],
    "additionalProperties": False,
}

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

SCHEMAS = {
    "booking": BOOKING,
    "formats": {
        "type": "object",
        "properties": {
            name: {"type": "string", "format": name}
            for name in ("date-time", "date", "time", "email", "hostname", "ipv4", "ipv6", "uri", "uuid", "duration")
        },
        "required": ["date-time", "date", "time", "email", "hostname", "ipv4", "ipv6", "uri", "uuid", "duration"],
    },
    "bounds": {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 13},
            "b": {"type": "integer", "maximum": -40},
            "c": {"type": "integer", "minimum": 1000, "multipleOf": 250},
            "d": {"type": "number", "minimum": -1.5, "maximum": -1.25},
            "e": {"type": "number", "multipleOf": 0.25, "minimum": 2, "maximum": 3},
            "f": {"type": "string", "minLength": 30},
            "g": {"type": "string", "maxLength": 2},
            "h": {"type": "array", "minItems": 4, "items": {"type": "boolean"}},
            "i": {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 3, "maxItems": 3, "uniqueItems": True},
        },
        "required": list("abcdefghi"),
    },
    "refs": {
        "type": "object",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["label"],
            }
        },
        "properties": {"tree": {"$ref": "#/$defs/node"}},
        "required": ["tree"],
    },
    "combinators": {
        "type": "object",
        "properties": {
            "either": {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^x+$"}]},
            "any": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
            "all": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    {"properties": {"b": {"const": "fixed"}}, "required": ["b"]},
                ]
            },
            "not_five": {"type": "integer", "minimum": 4, "maximum": 6, "not": {"const": 5}},
        },
        "required": ["either", "any", "all", "not_five"],
    },
    "objects": {
        "type": "object",
        "properties": {
            "sized": {
                "type": "object",
                "properties": {k: {"type": "integer"} for k in "pqrstu"},
                "minProperties": 4,
                "maxProperties": 5,
            },
            "free": {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2},
            "dependent": {
                "type": "object",
                "properties": {"card": {"type": "string"}, "expiry": {"type": "string"}},
                "required": ["card"],
                "dependentRequired": {"card": ["expiry"]},
            },
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
            "has_big": {
                "type": "array",
                "items": {"type": "integer"},
                "contains": {"type": "integer", "minimum": 1000},
            },
        },
        "required": ["sized", "free", "dependent", "pair", "has_big"],
    },
    "draft4": {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "n": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1, "exclusiveMaximum": True},
            "pair": {"type": "array", "items": [{"type": "string"}, {"type": "boolean"}], "additionalItems": False},
        },
        "required": ["n", "pair"],
    },
    "untyped": {"properties": {"anything": {}, "example": {"examples": ["from the schema"]}}, "required": ["anything"]},
}


def _valid(schema: dict, value) -> list[str]:
    cls = validator_for(schema, default=Draft202012Validator)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return [error.message for error in validator.iter_errors(value)]


@pytest.mark.parametrize("name", SCHEMAS)
@pytest.mark.parametrize("optional", ["some", "all", "none"])
def test_drawn_arguments_fit_their_schema(name, optional):
    schema = SCHEMAS[name]
    for seed in range(30):
        value = tool_arguments(schema, random.Random(seed), optional=optional)
        assert _valid(schema, value) == [], (seed, value)


def test_optional_properties_follow_the_option():
    required = set(BOOKING["required"])
    drawn = [set(tool_arguments(BOOKING, random.Random(seed), optional="some")) for seed in range(20)]
    assert all(required <= keys for keys in drawn)
    assert any(keys - required for keys in drawn) and any(keys == required for keys in drawn)
    assert set(tool_arguments(BOOKING, random.Random(1), optional="all")) == set(BOOKING["properties"])
    assert set(tool_arguments(BOOKING, random.Random(1), optional="none")) == required


def test_draws_are_deterministic_and_readable():
    first = tool_arguments(BOOKING, random.Random("seed"))
    assert first == tool_arguments(BOOKING, random.Random("seed"))
    assert first != tool_arguments(BOOKING, random.Random("other seed"))
    # Words that name the field, not noise: the point is to see what a tool does with them.
    assert schema_value({"type": "string"}, random.Random(0)).isprintable()
    assert tool_arguments(WEATHER, random.Random(0))["city"].endswith(" city")


def test_a_schema_nothing_fits_gives_a_candidate_instead_of_failing():
    impossible = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}},
        "required": ["n"],
    }
    value = tool_arguments(impossible, random.Random(0))
    assert set(value) == {"n"} and _valid(impossible, value) != []
    # A required property that contains itself has no finite value; the draw still ends.
    endless = {"type": "object", "properties": {"self": {"$ref": "#"}}, "required": ["self"]}
    assert isinstance(tool_arguments(endless, random.Random(0)), dict)
    # Not a schema jsonschema accepts: drawn anyway, unchecked.
    assert isinstance(tool_arguments({"type": "object", "properties": {"x": {"type": 7}}}, random.Random(0)), dict)


@pytest.mark.parametrize(
    "field",
    [
        {"type": "string", "minLength": 10**9},
        {"type": "string", "pattern": "^x{100000000}$"},
        {"type": "array", "minItems": 10**9},
        {"type": "number", "minimum": 10**400},
        {"type": "number", "multipleOf": 1e-320},
    ],
)
def test_schemas_asking_for_absurd_sizes_are_answered_at_once(field):
    # The server must not build a gigabyte (or overflow a float) because a schema asked for it.
    value = tool_arguments({"type": "object", "properties": {"x": field}, "required": ["x"]}, random.Random(0))
    assert isinstance(value, dict) and len(json.dumps(value)) < 100_000
