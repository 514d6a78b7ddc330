"""Tolerant parsing, strict validation: nothing invalid reaches a tool, and the model is told why."""

import pytest

from conversations.models import ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from engine.loop import run_advance
from tests.factories import ModelConfigFactory, make_agent
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


SCRIPT = {
    "scenarios": [
        {
            "match": "go",
            "steps": [
                {
                    "tool_calls": [
                        {"id": "c1", "name": "no_such_tool", "arguments": {}},
                        {"id": "c2", "name": "calculator", "arguments": {"expression": "1+1", "precision": 2}},
                        {"id": "c3", "name": "calculator", "arguments": 'Sure! {"expression": "6*7"}'},
                        {"id": "c4", "name": "calculator", "arguments": "expression: 6*7"},
                    ]
                },
                {"content": "done"},
            ],
        }
    ]
}


@pytest.mark.django_db(transaction=True)
def test_a_run_reports_bad_calls_to_the_model_and_runs_only_valid_ones(fake_llm, no_enqueue):
    fake_llm.script("arguments-test", SCRIPT)
    agent = make_agent(
        tools=["calculator", "current_time"],
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="arguments-test"),
    )
    run = message_post(conversation=conversation_create(agent=agent), content="go")
    run_advance(run_id=run.pk)

    results = {i.tool_call_id: i for i in ToolInvocation.objects.filter(run=run)}
    assert results["c1"].status == "error"
    assert results["c1"].result == "There is no tool named 'no_such_tool'. Available tools: calculator, current_time."
    assert results["c2"].status == "error" and results["c2"].started_at is None
    assert "Unsupported argument(s) precision; this tool accepts only: expression." in results["c2"].result
    assert results["c3"].status == "succeeded" and '"result":42' in results["c3"].result
    assert results["c4"].status == "error" and "not valid JSON" in results["c4"].result
    run.refresh_from_db()
    assert run.status == "completed"
