"""The fake server's generic mode: it calls the tools a request offers, with arguments drawn from
their schemas, and answers from what they returned. No Django involved."""

from __future__ import annotations

import json

import httpx
import pytest

from fakellm.loader import load_default_scripts
from fakellm.testing import serve_in_thread
from tests.unit.fakellm.test_generic_mode import BOOKING, WEATHER, _valid

HTTP = httpx.Client(timeout=10)


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
