"""The provider adapters against the shipped fake model server: both wire formats, plain and
streamed, usage, faults, and the mapping of parameters and messages.

Every call is made twice: as plain code (the CLI, the tests) and carried by an event loop as a
worker's runs are (platform_site.green: aiohttp underneath), which must read the same."""

import json
import uuid
from functools import partial

import pytest
from django.core.exceptions import ValidationError

from agents.models import Agent, ModelConfig
from agents.providers import ProviderError, get_provider
from agents.providers.base import estimate_tokens
from tests.support.carried import carry
from tests.unit.agents.test_providers import TOOLS

PROVIDERS = ["openai_compatible", "anthropic"]
TWO_CALLS = {
    "content": "Let me look that up.",
    "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "上海"}},
        {"name": "get_current_time", "arguments": {}},
    ],
    "usage": {"prompt_tokens": 120, "completion_tokens": 30, "cached_tokens": 20, "reasoning_tokens": 5},
}


def model_dict(name: str, base_url: str, provider: str, stream: bool, **fields) -> dict:
    return {
        "id": 0,
        "name": name,
        "provider": provider,
        "base_url": base_url,
        "model": name,
        "stream": stream,
        "max_retries": 0,
        "read_timeout_seconds": 5,
        "connect_timeout_seconds": 2,
        **fields,
    }


_carried = False


def pytest_generate_tests(metafunc):
    if "fake_llm" in metafunc.fixturenames:
        metafunc.parametrize("how", ["plain", "carried"], indirect=True)


@pytest.fixture(autouse=True)
def how(request):
    """How this test's calls to the fake model server are made (`call` reads it)."""
    global _carried
    _carried = getattr(request, "param", "plain") == "carried"
    yield
    _carried = False


def call(
    fake_llm, script: dict, provider: str, *, stream: bool = False, messages=None, tools=TOOLS, on_delta=None, **fields
):
    """(response, request body as the fake server received it)."""
    name = fake_llm.script(f"p-{uuid.uuid4().hex[:12]}", script)
    model = model_dict(name, fake_llm.api_base, provider, stream, **fields)
    adapter = get_provider(provider)
    body = adapter.build_request(
        model=model,
        messages=messages or [{"role": "user", "content": "上海天气?"}],
        tools=tools,
        tool_choice="auto",
        parallel_tool_calls=True,
    )
    send = partial(adapter.send, model=model, api_key="secret", body=body, on_delta=on_delta)
    response = carry(send) if _carried else send()
    return response, fake_llm.requests(name)[-1]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_and_several_tool_calls_read_alike_in_both_formats(fake_llm, provider, stream):
    deltas = []
    response, _ = call(fake_llm, {"fallback": TWO_CALLS}, provider, stream=stream, on_delta=deltas.append)

    assert response.content == "Let me look that up."
    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("get_weather", {"city": "上海"}),
        ("get_current_time", {}),
    ]
    assert all(c.id for c in response.tool_calls)
    assert response.finish_reason == "tool_calls"
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.total_tokens) == (120, 30, 20, 150)
    assert not usage.estimated
    # Reasoning tokens are reported by the OpenAI format only (Anthropic counts them as output).
    assert usage.reasoning_tokens == (5 if provider == "openai_compatible" else 0)
    if stream:
        assert len(deltas) > 1 and "".join(deltas) == response.content


@pytest.mark.parametrize("style", ["standard", "repeat_id_name", "single_chunk_args"])
@pytest.mark.parametrize("omit_ids", [False, True], ids=["ids", "no-ids"])
def test_streamed_tool_call_deltas_are_assembled_whatever_the_server_style(fake_llm, style, omit_ids):
    script = {"defaults": {"stream_style": style, "omit_tool_call_ids": omit_ids}, "fallback": TWO_CALLS}
    response, _ = call(fake_llm, script, "openai_compatible", stream=True)

    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("get_weather", {"city": "上海"}),
        ("get_current_time", {}),
    ]
    assert all(bool(c.id) != omit_ids for c in response.tool_calls)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_missing_usage_is_estimated_and_marked(fake_llm, provider, stream):
    response, _ = call(fake_llm, {"fallback": {"content": "short answer", "usage": None}}, provider, stream=stream)

    assert response.usage.estimated
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens == estimate_tokens("short answer")
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


def test_stream_without_usage_chunk_is_estimated(fake_llm):
    script = {"defaults": {"stream_usage": False}, "fallback": {"content": "hi there"}}
    response, _ = call(fake_llm, script, "openai_compatible", stream=True)
    assert response.usage.estimated and response.content == "hi there"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_cut_in_the_middle_is_a_retryable_error_not_a_half_answer(fake_llm, provider):
    script = {"fallback": {**TWO_CALLS, "fault": {"kind": "cut_stream"}}}
    with pytest.raises(ProviderError) as caught:
        call(fake_llm, script, provider, stream=True)
    assert caught.value.retryable and "before the answer was complete" in caught.value.message


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_malformed_body_is_a_retryable_error(fake_llm, provider, stream):
    with pytest.raises(ProviderError) as caught:
        call(fake_llm, {"fallback": {"content": "x", "fault": {"kind": "malformed_json"}}}, provider, stream=stream)
    assert caught.value.retryable


@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_is_retryable_and_carries_retry_after(fake_llm, provider):
    with pytest.raises(ProviderError) as caught:
        call(fake_llm, {"fallback": {"content": "x", "fault": {"status": 429, "retry_after": 3}}}, provider)
    error = caught.value
    assert (error.retryable, error.http_status, error.retry_after) == (True, 429, 3.0)
    assert "Rate limit" in error.message


@pytest.mark.parametrize("provider", PROVIDERS)
def test_other_4xx_are_not_retryable(fake_llm, provider):
    with pytest.raises(ProviderError) as caught:
        call(fake_llm, {"fallback": {"content": "x", "fault": {"status": 400}}}, provider)
    assert not caught.value.retryable and caught.value.http_status == 400


def test_anthropic_request_has_seed_002s_shape(fake_llm):
    messages = [
        {"role": "system", "content": "你是一个乐于助人的助手。"},
        {"role": "user", "content": "上海现在天气怎么样?现在几点了?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "上海"}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "get_current_time", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "上海:晴,26℃"},
        {"role": "tool", "tool_call_id": "call_2", "name": "get_current_time", "content": "2026-10-08 23:30:06"},
    ]
    response, sent = call(
        fake_llm,
        {"fallback": {"content": "上海晴,26℃。现在是23:30。"}},
        "anthropic",
        messages=messages,
        max_tokens=2048,
        # Seed 002's shape as it is; the cache's breakpoints: tests/unit/agents/test_prompt_caching.py.
        prompt_caching="off",
    )

    assert sent["system"] == "你是一个乐于助人的助手。" and sent["max_tokens"] == 2048
    assert sent["messages"] == [
        {"role": "user", "content": "上海现在天气怎么样?现在几点了?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "上海"}},
                {"type": "tool_use", "id": "call_2", "name": "get_current_time", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "上海:晴,26℃"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "2026-10-08 23:30:06"},
            ],
        },
    ]
    assert sent["tools"][0] == {
        "name": "get_weather",
        "description": "查询指定城市的当前天气",
        "input_schema": TOOLS[0]["parameters"],
    }
    assert response.content == "上海晴,26℃。现在是23:30。" and response.finish_reason == "stop"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields,field,phrase",
    [
        ({"frequency_penalty": 0.5}, "frequency_penalty", "no frequency penalty"),
        ({"presence_penalty": 0.5}, "presence_penalty", "no presence penalty"),
        ({"seed": 7}, "seed", "no seed"),
        ({"response_format": "json_object"}, "response_format", "no response format"),
        ({"temperature": 1.5}, "temperature", "from 0 to 1"),
        ({"thinking": "auto"}, "thinking", "not auto"),
        (
            {"thinking": "enabled", "thinking_budget_tokens": 500, "max_tokens": 4000},
            "thinking_budget_tokens",
            "at least 1024",
        ),
        (
            {"thinking": "enabled", "thinking_budget_tokens": 2048, "max_tokens": 1000},
            "max_tokens",
            "above the thinking budget",
        ),
        (
            {"thinking": "enabled", "thinking_budget_tokens": 2048, "max_tokens": 4000, "temperature": 0.5},
            "temperature",
            "default temperature",
        ),
        ({"reasoning_effort": "high"}, "reasoning_effort", "no reasoning effort"),
    ],
)
def test_parameters_anthropic_lacks_are_refused_on_save(fields, field, phrase):
    config = ModelConfig(
        name="c", base_url="https://api.anthropic.com/v1", model="claude", provider="anthropic", **fields
    )
    with pytest.raises(ValidationError) as caught:
        config.full_clean()
    assert phrase in " ".join(caught.value.message_dict[field])


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields,field,phrase",
    [
        (
            {"thinking": "enabled", "thinking_budget_tokens": 2048},
            "thinking_budget_tokens",
            "no standard thinking budget",
        ),
        ({"response_format": "json_schema"}, "response_schema", "Give the JSON Schema"),
        ({"response_schema": {"type": "object"}}, "response_schema", "only used with"),
        ({"stop": "END"}, "stop", "list of non-empty strings"),
    ],
)
def test_openai_compatible_refusals(fields, field, phrase):
    config = ModelConfig(name="c", base_url="https://api.openai.com/v1", model="gpt", **fields)
    with pytest.raises(ValidationError) as caught:
        config.full_clean()
    assert phrase in " ".join(caught.value.message_dict[field])


@pytest.mark.django_db
def test_supported_parameters_save_cleanly():
    ModelConfig(
        name="a",
        base_url="https://api.anthropic.com/v1",
        model="claude",
        provider="anthropic",
        temperature=0.7,
        top_p=0.9,
        max_tokens=4000,
        stop=["END"],
        thinking="disabled",
    ).full_clean()
    ModelConfig(
        name="o",
        base_url="https://ark.example/api/v3",
        model="doubao",
        temperature=0.8,
        seed=1,
        frequency_penalty=0,
        response_format="json_object",
        thinking="disabled",
        reasoning_effort="low",
    ).full_clean()


@pytest.mark.django_db
def test_agent_tool_choice_is_checked_against_its_models():
    thinking = ModelConfig.objects.create(
        name="t",
        base_url="https://api.anthropic.com/v1",
        model="claude",
        provider="anthropic",
        max_tokens=4000,
        thinking="enabled",
        thinking_budget_tokens=2048,
    )
    agent = Agent(name="a", slug="a", model_config=thinking, tool_choice="required")
    with pytest.raises(ValidationError) as caught:
        agent.clean()
    assert "only tool choice auto or none" in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        Agent(name="b", slug="b", model_config=thinking, tool_choice="tool").clean()
    assert "Name the tool" in str(caught.value)
