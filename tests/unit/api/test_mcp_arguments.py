"""An MCP tool call's arguments, read as the tool's input schema promises: what is accepted and
the sentence a refusal gives the client's model."""

import pytest

from api.mcp_calls import INPUT_SCHEMA, CallRefused, _arguments


@pytest.mark.parametrize(
    ("arguments", "read"),
    [
        ({"message": "hi"}, ("hi", None, "")),
        ({"message": "hi", "end_user": "  客户 42 "}, ("hi", None, "客户 42")),
        (
            {"message": "again", "conversation_id": "8a4f8a52-3c0e-4c77-9e51-1d0c2b1f0a11"},
            ("again", "8a4f8a52-3c0e-4c77-9e51-1d0c2b1f0a11", ""),
        ),
    ],
)
def test_the_schema_s_arguments_are_read(arguments, read):
    assert _arguments(arguments) == read


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (None, "object"),
        (["hi"], "object"),
        ({}, "message must be a string"),
        ({"message": " \n"}, "must not be empty"),
        ({"message": 42}, "message must be a string"),
        ({"message": "hi\x00"}, "NUL"),
        ({"message": "hi\ud800"}, "surrogate"),
        ({"message": "x" * 40_000}, "at most"),
        ({"message": "hi", "model": "gpt"}, "Unknown argument 'model'"),
        ({"message": "hi", "conversation_id": 7}, "conversation_id must be a string"),
        ({"message": "hi", "end_user": "a\nb"}, "end_user"),
    ],
)
def test_a_refusal_says_what_is_wrong(arguments, says):
    with pytest.raises(CallRefused, match=says):
        _arguments(arguments)


def test_the_schema_names_every_argument_read():
    assert set(INPUT_SCHEMA["properties"]) == {"message", "conversation_id", "end_user"}
    assert INPUT_SCHEMA["required"] == ["message"]
