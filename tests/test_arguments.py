from tools.arguments import parse_arguments, validate_arguments

SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "start_time": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["summary"],
}


def test_plain_json_object():
    assert parse_arguments('{"summary": "x"}').arguments == {"summary": "x"}


def test_object_inside_surrounding_text_and_fences():
    parsed = parse_arguments('Sure, here you go:\n```json\n{"summary": "会议", "days": 2}\n```')
    assert parsed.ok and parsed.arguments == {"summary": "会议", "days": 2}


def test_empty_arguments_mean_no_arguments():
    assert parse_arguments("").arguments == {}


def test_unparseable_arguments_become_an_actionable_error():
    parsed = parse_arguments("city = Chengdu")
    assert not parsed.ok
    assert "not valid JSON" in parsed.errors[0] and "one JSON object" in parsed.errors[0]


def test_non_object_json_is_refused():
    parsed = parse_arguments("[1, 2]")
    assert not parsed.ok and "must be a JSON object" in parsed.errors[0]


def test_unknown_property_names_what_is_allowed():
    errors = validate_arguments(SCHEMA, {"summary": "x", "calendar": "iphone"})
    assert errors == ["Unsupported argument(s) calendar; this tool accepts only: summary, start_time, days."]


def test_missing_required_and_wrong_type_are_reported():
    errors = validate_arguments(SCHEMA, {"days": "three"})
    assert any("'summary' is a required property" in e for e in errors)
    assert any(e.startswith("Argument 'days'") and "integer" in e for e in errors)


def test_explicit_additional_properties_are_allowed():
    assert validate_arguments({**SCHEMA, "additionalProperties": True}, {"summary": "x", "extra": 1}) == []
