"""The provider adapters' mapping of parameters, messages and streamed deltas, read from payloads
and a mocked HTTP seam; the calls against the fake model server are in
tests/agents/test_providers.py."""

import json

import httpx
import pytest

from agents.providers import get_provider
from agents.providers.anthropic import to_anthropic_messages
from agents.providers.base import estimate_tokens
from platform_site import outbound

TOOLS = [
    {
        "name": "get_weather",
        "description": "查询指定城市的当前天气",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {
        "name": "get_current_time",
        "description": "获取当前的日期和时间",
        "parameters": {"type": "object", "properties": {}},
    },
]


@pytest.fixture
def mock_seam(monkeypatch):
    """Answers every outbound request with `handler`, recording the requests."""
    seen = []

    def install(handler):
        def record(request):
            seen.append(request)
            return handler(request)

        client = httpx.Client(transport=httpx.MockTransport(record))
        monkeypatch.setattr(outbound, "get_client", lambda: client)
        return seen

    return install


ANTHROPIC_MODEL = {
    "id": 0,
    "name": "claude",
    "provider": "anthropic",
    "base_url": "https://llm.test/v1",
    "model": "claude-x",
    "max_tokens": 4000,
    "thinking": "enabled",
    "thinking_budget_tokens": 2048,
}


def test_deltas_without_index_split_on_a_new_id():
    from agents.providers.openai_compatible import _merge_tool_delta

    calls = []
    for part in [
        {"id": "a", "function": {"name": "f", "arguments": '{"x":'}},
        {"id": "a", "function": {"name": "f", "arguments": "1}"}},
        {"id": "b", "function": {"name": "g", "arguments": "{}"}},
    ]:
        _merge_tool_delta(calls, part, 0)
    assert calls == [{"id": "a", "name": "f", "arguments": '{"x":1}'}, {"id": "b", "name": "g", "arguments": "{}"}]


def test_anthropic_merges_same_role_neighbours_and_keeps_thinking_blocks():
    thinking = {"type": "thinking", "thinking": "need the weather", "signature": "sig"}
    system, messages = to_anthropic_messages(
        [
            {"role": "user", "content": "first"},
            {"role": "user", "content": "second"},
            {
                "role": "assistant",
                "content": "",
                "reasoning": [thinking],
                "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "ok"},
            {"role": "user", "content": "third"},
        ]
    )
    assert system == ""
    assert messages[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
    }
    assert messages[1]["content"] == [thinking, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
        {"type": "text", "text": "third"},
    ]


def test_anthropic_sends_its_headers_and_reads_thinking_blocks(mock_seam):
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "stop_reason": "tool_use",
        "content": [
            {"type": "thinking", "thinking": "check weather", "signature": "sig-1"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "上海"}},
        ],
        "usage": {
            "input_tokens": 50,
            "cache_read_input_tokens": 30,
            "cache_creation_input_tokens": 20,
            "output_tokens": 40,
        },
    }
    seen = mock_seam(lambda request: httpx.Response(200, json=answer))
    adapter = get_provider("anthropic")
    body = adapter.build_request(
        model=ANTHROPIC_MODEL,
        messages=[{"role": "user", "content": "hi"}],
        tools=TOOLS,
        tool_choice="auto",
        parallel_tool_calls=False,
    )
    response = adapter.send(model=ANTHROPIC_MODEL, api_key="sk-ant", body=body)

    request = seen[0]
    assert str(request.url) == "https://llm.test/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant" and request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert json.loads(request.content)["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert json.loads(request.content)["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert response.reasoning == [answer["content"][0]]
    assert response.tool_calls[0].name == "get_weather" and response.finish_reason == "tool_calls"
    # Cache reads and writes are prompt tokens too; reads are the cached ones.
    assert (response.usage.prompt_tokens, response.usage.cached_tokens, response.usage.total_tokens) == (100, 30, 140)


def test_anthropic_stream_assembles_thinking_and_split_tool_input(mock_seam):
    events = [
        (
            "message_start",
            {
                "message": {
                    "id": "m",
                    "model": "claude-x",
                    "content": [],
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                }
            },
        ),
        ("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
        ("content_block_stop", {"index": 0}),
        (
            "content_block_start",
            {"index": 1, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {}}},
        ),
        ("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"ci'}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": 'ty": "成都"}'}}),
        ("content_block_stop", {"index": 1}),
        ("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
        ("message_stop", {}),
    ]
    text = "".join(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n" for kind, data in events)
    mock_seam(lambda request: httpx.Response(200, text=text, headers={"content-type": "text/event-stream"}))
    model = {**ANTHROPIC_MODEL, "stream": True}
    adapter = get_provider("anthropic")
    body = adapter.build_request(
        model=model,
        messages=[{"role": "user", "content": "hi"}],
        tools=TOOLS,
        tool_choice="auto",
        parallel_tool_calls=True,
    )
    response = adapter.send(model=model, api_key="", body=body)

    assert response.reasoning == [{"type": "thinking", "thinking": "hmm", "signature": "sig"}]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("toolu_9", "f", {"city": "成都"})
    ]
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (10, 12)


def test_openai_mapping_of_every_parameter():
    model = {
        "model": "m",
        "temperature": 0.3,
        "top_p": 0.9,
        "max_tokens": 512,
        "frequency_penalty": 0.5,
        "presence_penalty": -0.5,
        "seed": 42,
        "stop": ["END"],
        "response_format": "json_schema",
        "response_schema": {"type": "object"},
        "thinking": "disabled",
        "reasoning_effort": "low",
        "stream": True,
        "extra_params": {"user": "u1"},
    }
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "x", "reasoning": [{"type": "thinking"}]},
    ]
    body = get_provider("openai_compatible").build_request(
        model=model,
        messages=messages,
        tools=TOOLS,
        tool_choice="tool",
        tool_name="get_weather",
        parallel_tool_calls=False,
    )

    assert {
        k: body[k]
        for k in (
            "temperature",
            "top_p",
            "max_tokens",
            "frequency_penalty",
            "presence_penalty",
            "seed",
            "stop",
            "reasoning_effort",
            "user",
        )
    } == {
        "temperature": 0.3,
        "top_p": 0.9,
        "max_tokens": 512,
        "frequency_penalty": 0.5,
        "presence_penalty": -0.5,
        "seed": 42,
        "stop": ["END"],
        "reasoning_effort": "low",
        "user": "u1",
    }
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}},
    }
    assert body["thinking"] == {"type": "disabled"}  # seed 000's thinking_type
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["parallel_tool_calls"] is False
    assert body["stream_options"] == {"include_usage": True}
    assert "reasoning" not in body["messages"][1]


@pytest.mark.parametrize(
    "choice,expected",
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        ("tool", {"type": "tool", "name": "get_weather"}),
    ],
)
def test_anthropic_tool_choice_mapping(choice, expected):
    body = get_provider("anthropic").build_request(
        model={"model": "m", "stop": ["END"], "temperature": 0.2},
        messages=[{"role": "user", "content": "x"}],
        tools=TOOLS,
        tool_choice=choice,
        tool_name="get_weather",
        parallel_tool_calls=True,
    )
    assert body["tool_choice"] == expected
    assert body["stop_sequences"] == ["END"] and body["temperature"] == 0.2 and body["max_tokens"] == 4096


def test_token_estimate_counts_chinese_characters_as_tokens():
    assert estimate_tokens("abcdefgh") == 2
    assert estimate_tokens("上海天气") == 4
    assert estimate_tokens("ab上海") == 3
