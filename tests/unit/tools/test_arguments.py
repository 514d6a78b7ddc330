"""Tolerant parsing, strict validation: nothing invalid reaches a tool, and the model is told why."""

import pytest

from tools.arguments import parse_arguments, validate_arguments

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city"],
}


@pytest.mark.parametrize(
    "raw",
    [
        '{"city": "成都"}',
        'Here are the arguments: {"city": "成都"} — hope that helps',
        '```json\n{"city": "成都"}\n```',
        'first {not json} then {"city": "成都"}',
        {"city": "成都"},
    ],
)
def test_json_is_found_in_what_models_send(raw):
    assert parse_arguments(raw).arguments == {"city": "成都"}


def test_empty_arguments_are_an_empty_object():
    assert parse_arguments("").arguments == {} and parse_arguments(None).arguments == {}


@pytest.mark.parametrize(
    "raw,message",
    [
        ("city=成都", "not valid JSON"),
        ("[1, 2]", "must be a JSON object, not list"),
        ('"成都"', "must be a JSON object, not str"),
    ],
)
def test_unparseable_arguments_get_an_actionable_error(raw, message):
    parsed = parse_arguments(raw)
    assert not parsed.ok and message in parsed.errors[0]


def test_validation_names_what_is_allowed():
    assert validate_arguments(SCHEMA, {"city": "成都", "day": 3}) == [
        "Unsupported argument(s) day; this tool accepts only: city, days."
    ]
    assert validate_arguments(SCHEMA, {}) == ["'city' is a required property; provide it and call again."]
    assert validate_arguments(SCHEMA, {"city": "成都", "days": 9}) == [
        "Argument 'days': 9 is greater than the maximum of 7."
    ]
    assert validate_arguments(SCHEMA, {"city": 7}) == ["Argument 'city': 7 is not of type 'string'."]


def test_schema_that_allows_extra_properties_is_respected():
    assert validate_arguments({**SCHEMA, "additionalProperties": True}, {"city": "成都", "extra": 1}) == []
