"""Prompt caching on both wires: Anthropic's breakpoints, OpenAI's prompt_cache_key, the usage
each reports and what it costs. No database."""

from decimal import Decimal

import pytest

from agents.providers import LLMResponse, Usage
from agents.providers.anthropic import AnthropicProvider, _parse_message
from agents.providers.caching import MAX_BREAKPOINTS, MEMORY_CHARS, cache_key
from agents.providers.openai_compatible import OpenAICompatibleProvider, _parse_completion
from engine.context import _assemble
from engine.model_call import call_cost

TOOLS = [
    {"name": "get_weather", "description": "Weather of a city.", "parameters": {"type": "object"}},
    {"name": "get_route", "description": "A driving route.", "parameters": {"type": "object"}},
]
MEMORY = {"role": "user", "content": '<user_memory>\n- fact: "Lives in Chengdu"\n</user_memory>'}
KEY = cache_key(agent_id=7, version_id=3, purpose="step")


def _conversation(memory=MEMORY):
    turns = [
        [{"role": "user", "content": "Weather tomorrow?"}],
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
        ],
    ]
    return _assemble("You are a helpful assistant.", "", turns, memory)


def _anthropic(caching: str | None = None, messages=None, tools=TOOLS):
    model = {"model": "claude", "max_tokens": 100}
    if caching:
        model["prompt_caching"] = caching
    return AnthropicProvider().build_request(
        model=model,
        messages=messages or _conversation(),
        tools=tools,
        tool_choice="auto",
        parallel_tool_calls=True,
        cache_key=KEY,
    )


def _openai(caching: str | None, base_url="https://api.openai.com/v1"):
    model = {"model": "gpt", "base_url": base_url}
    if caching:
        model["prompt_caching"] = caching
    return OpenAICompatibleProvider().build_request(
        model=model, messages=_conversation(), tools=TOOLS, tool_choice="auto", parallel_tool_calls=True, cache_key=KEY
    )


def _breakpoints(body: dict) -> list[str]:
    found = [f"tool {t['name']}" for t in body.get("tools", []) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += ["system" for block in system if "cache_control" in block]
    for index, message in enumerate(body["messages"]):
        if isinstance(message["content"], list):
            found += [f"message {index} {b['type']}" for b in message["content"] if "cache_control" in b]
    return found


def test_anthropic_marks_the_last_tool_the_system_the_memories_and_the_last_message():
    body = _anthropic()
    assert _breakpoints(body) == ["tool get_route", "system", "message 0 text", "message 2 tool_result"]
    assert len(_breakpoints(body)) <= MAX_BREAKPOINTS
    assert all(
        block["cache_control"] == {"type": "ephemeral"}
        for block in [body["tools"][-1], body["system"][0], body["messages"][0]["content"][0]]
    )
    # The same text as without breakpoints: the memories' block and the user's words, cut where
    # the memories end.
    opening = body["messages"][0]["content"]
    assert "".join(block["text"] for block in opening) == _anthropic("off")["messages"][0]["content"]
    assert opening[0]["text"].startswith("<user_memory>") and opening[1] == {
        "type": "text",
        "text": "Weather tomorrow?",
    }
    assert body["system"] == [
        {"type": "text", "text": "You are a helpful assistant.", "cache_control": {"type": "ephemeral"}}
    ]
    # The key is OpenAI's alone.
    assert "prompt_cache_key" not in body


def test_anthropic_sends_no_breakpoint_when_caching_is_off():
    body = _anthropic("off")
    assert _breakpoints(body) == []
    assert body["system"] == "You are a helpful assistant."
    assert "cache_control" not in str(body)


def test_anthropic_breakpoints_without_tools_or_memories_stay_within_the_limit():
    body = _anthropic(messages=_conversation(memory=None), tools=[])
    assert _breakpoints(body) == ["system", "message 2 tool_result"]
    only_memory = _anthropic(messages=[{"role": "system", "content": "S"}, {**MEMORY, MEMORY_CHARS: 10**6}])
    # The memories are the whole conversation: one breakpoint closes them.
    assert _breakpoints(only_memory) == ["tool get_route", "system", "message 0 text"]


def test_openai_sends_the_key_to_openai_on_auto_to_any_server_on_on_and_never_on_off():
    assert _openai(None)["prompt_cache_key"] == "agent-7-v3-step"
    assert "prompt_cache_key" not in _openai(None, base_url="http://127.0.0.1:8080/v1")
    assert _openai("on", base_url="http://127.0.0.1:8080/v1")["prompt_cache_key"] == "agent-7-v3-step"
    assert "prompt_cache_key" not in _openai("off")
    # The memories' mark is the engine's: no OpenAI-compatible server sees it.
    assert all(MEMORY_CHARS not in message for message in _openai("on")["messages"])


def test_the_key_names_the_agent_version_and_the_purpose_only():
    assert cache_key(agent_id=7, version_id=3, purpose="summary") == "agent-7-v3-summary"
    assert cache_key(agent_id=7, version_id=None, purpose="step") == "agent-7-v0-step"


def test_anthropic_usage_sums_input_cache_reads_and_cache_writes():
    data = {
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 20,
            "cache_read_input_tokens": 1500,
            "cache_creation_input_tokens": 300,
            "output_tokens": 7,
        },
    }
    usage = _parse_message(data, {}, 200).usage
    assert (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens) == (1820, 1500, 300)
    assert usage.total_tokens == 1827


def test_openai_usage_reads_the_cached_tokens_in_the_prompt_details():
    data = {
        "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920},
        },
    }
    usage = _parse_completion(data, {}, 200).usage
    assert (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens) == (2006, 1920, 0)


PRICES = {
    "price_input_per_million": "3",
    "price_cached_input_per_million": "0.3",
    "price_output_per_million": "15",
}


@pytest.mark.parametrize(
    ("prices", "expected"),
    [
        # Cache writes at the input price when the config sets no price of their own.
        (PRICES, 20 * 3 + 1500 * Decimal("0.3") + 300 * 3 + 7 * 15),
        (
            {**PRICES, "price_cache_write_per_million": "3.75"},
            20 * 3 + 1500 * Decimal("0.3") + 300 * Decimal("3.75") + 7 * 15,
        ),
    ],
)
def test_cached_tokens_and_cache_writes_are_priced_apart(prices, expected):
    usage = Usage(
        prompt_tokens=1820, completion_tokens=7, cached_tokens=1500, cache_write_tokens=300, total_tokens=1827
    )
    assert call_cost(prices, LLMResponse("hi", [], "stop", usage, {})) == expected / 1_000_000
