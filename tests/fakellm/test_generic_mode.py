"""The fake server's generic mode: it calls the tools a request offers, with arguments drawn from
their schemas, and answers from what they returned. No Django involved."""

from __future__ import annotations

import json
import random

import httpx
import pytest
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from fakellm.loader import load_default_scripts
from fakellm.schema_values import schema_value, tool_arguments
from fakellm.testing import serve_in_thread

HTTP = httpx.Client(timeout=10)

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


# --- the server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def url():
    base_url, stop = serve_in_thread(
        {**load_default_scripts(), "one-tool": {"fallback": {"generic": {"call": "one", "optional": "all", "seed": 7}}}}
    )
    yield base_url
    stop()


def _openai_tools(*pairs) -> list[dict]:
    return [
        {"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": schema}}
        for name, schema in pairs
    ]


def _anthropic_tools(*pairs) -> list[dict]:
    return [{"name": name, "description": f"{name} tool", "input_schema": schema} for name, schema in pairs]


def _read_openai_stream(response: httpx.Response) -> dict:
    """The assistant message a client assembles from OpenAI chunks."""
    content, calls = "", {}
    for line in response.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for part in delta.get("tool_calls") or []:
                call = calls.setdefault(part["index"], {"id": part.get("id"), "name": "", "arguments": ""})
                call["name"] += part.get("function", {}).get("name", "")
                call["arguments"] += part.get("function", {}).get("arguments", "")
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())
        ]
    return message


def _openai(url: str, messages: list, *, stream: bool, model: str = "generic", **extra) -> dict:
    body = {"model": model, "messages": messages, "stream": stream, **extra}
    response = HTTP.post(f"{url}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return _read_openai_stream(response) if stream else response.json()["choices"][0]["message"]


def _read_anthropic_stream(response: httpx.Response) -> list[dict]:
    blocks: dict[int, dict] = {}
    partial: dict[int, str] = {}
    for line in response.text.splitlines():
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        if event["type"] == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                blocks[event["index"]]["text"] += delta["text"]
            else:
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text)
    return [blocks[i] for i in sorted(blocks)]


def _anthropic(url: str, messages: list, *, stream: bool, **extra) -> list[dict]:
    body = {"model": "generic", "max_tokens": 512, "messages": messages, "stream": stream, **extra}
    response = HTTP.post(f"{url}/v1/messages", json=body)
    assert response.status_code == 200, response.text
    return _read_anthropic_stream(response) if stream else response.json()["content"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_openai_calls_every_offered_tool_then_summarises(url, stream):
    tools = _openai_tools(("book", BOOKING), ("weather", WEATHER))
    messages = [{"role": "user", "content": "try the tools"}]
    first = _openai(url, messages, stream=stream, tools=tools)
    calls = first["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["book", "weather"]
    arguments = [json.loads(c["function"]["arguments"]) for c in calls]
    assert _valid(BOOKING, arguments[0]) == [] and _valid(WEATHER, arguments[1]) == []
    # The same question draws the same arguments, streamed or not.
    assert first == _openai(url, messages, stream=stream, tools=tools)
    assert arguments[0] == json.loads(
        _openai(url, messages, stream=not stream, tools=tools)["tool_calls"][0]["function"]["arguments"]
    )

    results = [
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": '{"booked": true}'},
        {"role": "tool", "tool_call_id": calls[1]["id"], "content": "sunny,\n 21 degrees"},
    ]
    answer = _openai(url, [*messages, first, *results], stream=stream, tools=tools)
    assert "tool_calls" not in answer
    assert answer["content"].splitlines() == [
        "I called 2 tools.",
        f"- book with {json.dumps(arguments[0], ensure_ascii=False, separators=(',', ':'))} returned: "
        '{"booked": true}',
        f"- weather with {json.dumps(arguments[1], ensure_ascii=False, separators=(',', ':'))} returned: "
        "sunny, 21 degrees",
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_anthropic_calls_every_offered_tool_then_summarises(url, stream):
    tools = _anthropic_tools(("book", BOOKING), ("weather", WEATHER))
    messages = [{"role": "user", "content": "try the tools"}]
    blocks = _anthropic(url, messages, stream=stream, tools=tools)
    uses = [b for b in blocks if b["type"] == "tool_use"]
    assert [u["name"] for u in uses] == ["book", "weather"]
    assert _valid(BOOKING, uses[0]["input"]) == [] and _valid(WEATHER, uses[1]["input"]) == []
    # Seeded by the question, not by the wire format.
    openai = _openai(url, messages, stream=False, tools=_openai_tools(("book", BOOKING), ("weather", WEATHER)))
    assert uses[0]["input"] == json.loads(openai["tool_calls"][0]["function"]["arguments"])

    results = [{"type": "tool_result", "tool_use_id": u["id"], "content": f"{u['name']} done"} for u in uses]
    messages += [{"role": "assistant", "content": blocks}, {"role": "user", "content": results}]
    [text] = _anthropic(url, messages, stream=stream, tools=tools)
    assert text["type"] == "text"
    assert text["text"].startswith("I called 2 tools.\n- book with {")
    assert text["text"].endswith("returned: weather done")


def test_one_call_per_step_when_parallel_calls_are_off(url):
    tools = _openai_tools(("book", BOOKING), ("weather", WEATHER))
    messages = [{"role": "user", "content": "one at a time"}]
    for expected in ("book", "weather"):
        message = _openai(url, messages, stream=False, tools=tools, parallel_tool_calls=False)
        [call] = message["tool_calls"]
        assert call["function"]["name"] == expected
        messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": f"{expected} ok"}]
    answer = _openai(url, messages, stream=False, tools=tools, parallel_tool_calls=False)
    assert answer["content"].startswith("I called 2 tools.")

    # Anthropic says the same with disable_parallel_tool_use.
    blocks = _anthropic(
        url,
        [{"role": "user", "content": "one at a time"}],
        stream=False,
        tools=_anthropic_tools(("book", BOOKING), ("weather", WEATHER)),
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    )
    assert [b["name"] for b in blocks if b["type"] == "tool_use"] == ["book"]


def test_tool_choice_is_honoured(url):
    tools = _openai_tools(("book", BOOKING), ("weather", WEATHER))
    messages = [{"role": "user", "content": "choices"}]
    named = _openai(
        url, messages, stream=False, tools=tools, tool_choice={"type": "function", "function": {"name": "weather"}}
    )
    assert [c["function"]["name"] for c in named["tool_calls"]] == ["weather"]
    off = _openai(url, messages, stream=False, tools=tools, tool_choice="none")
    assert off == {
        "role": "assistant",
        "content": "Tool use is off for this request, so I called none of the 2 tools offered.",
    }
    blocks = _anthropic(
        url, messages, stream=False, tools=_anthropic_tools(("book", BOOKING)), tool_choice={"type": "none"}
    )
    assert [b["type"] for b in blocks] == ["text"]
    plain = _openai(url, [{"role": "user", "content": "no tools here"}], stream=False)
    assert plain["content"] == "No tools were offered, so I called none. Your message: no tools here"


def test_call_one_picks_a_single_tool_by_the_seed(url):
    tools = _openai_tools(("book", BOOKING), ("weather", WEATHER), ("third", {"type": "object"}))
    messages = [{"role": "user", "content": "pick one"}]
    first = _openai(url, messages, stream=False, model="one-tool", tools=tools)
    [call] = first["tool_calls"]
    assert call == _openai(url, messages, stream=False, model="one-tool", tools=tools)["tool_calls"][0]
    chosen = {
        _openai(url, [{"role": "user", "content": f"pick {i}"}], stream=False, model="one-tool", tools=tools)[
            "tool_calls"
        ][0]["function"]["name"]
        for i in range(12)
    }
    assert len(chosen) > 1
    if call["function"]["name"] == "book":  # optional "all": every property is filled
        assert set(json.loads(call["function"]["arguments"])) == set(BOOKING["properties"])
    done = [first, {"role": "tool", "tool_call_id": call["id"], "content": "ok"}]
    assert _openai(url, [*messages, *done], stream=False, model="one-tool", tools=tools)["content"].startswith(
        "I called 1 tool."
    )


def test_the_answer_names_the_arguments_a_reviewer_changed(url):
    tools = _openai_tools(("weather", WEATHER))
    messages = [{"role": "user", "content": "edited"}]
    first = _openai(url, messages, stream=False, tools=tools)
    note = '[A reviewer changed the arguments before approving; the tool ran with {"city": "Lhasa"}]\nsunny'
    result = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": note}
    answer = _openai(url, [*messages, first, result], stream=False, tools=tools)["content"]
    assert answer.splitlines()[1].startswith('- weather with {"city":"Lhasa"} returned: [A reviewer changed')


@pytest.mark.parametrize(
    "step, fragment",
    [
        ({"generic": {"call": "all"}}, "fallback.generic.call: must be one of"),
        ({"generic": {"optional": 1}}, "fallback.generic.optional: must be one of"),
        ({"generic": {"seed": "x"}}, "fallback.generic.seed: must be an integer"),
        ({"generic": {"depth": 3}}, "fallback.generic: unknown key 'depth'"),
        ({"generic": [], "content": "x"}, "fallback: unknown key 'content'"),
        ({"generic": []}, "fallback.generic: must be an object"),
    ],
)
def test_malformed_generic_steps_are_refused(url, step, fragment):
    response = HTTP.put(f"{url}/_scripts/bad-generic", json={"fallback": step})
    assert response.status_code == 400 and fragment in response.json()["error"]


def test_a_generic_step_keeps_its_scripted_usage_and_faults(url):
    script = {
        "fallback": {
            "generic": {},
            "usage": {"prompt_tokens": 11, "completion_tokens": 3},
            "fault": {"status": 503, "times": 1},
        }
    }
    assert HTTP.put(f"{url}/_scripts/generic-usage", json=script).status_code == 200
    body = {
        "model": "generic-usage",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": _openai_tools(("weather", WEATHER)),
    }
    assert HTTP.post(f"{url}/v1/chat/completions", json=body).status_code == 503
    response = HTTP.post(f"{url}/v1/chat/completions", json=body).json()
    assert response["usage"]["prompt_tokens"] == 11 and response["usage"]["completion_tokens"] == 3
    assert response["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "weather"
