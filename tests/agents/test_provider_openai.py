"""The OpenAI-compatible adapter against the fake server's dialects."""

import pytest

from agents.providers import ProviderError, get_provider


def _model(base, name, **extra):
    return {
        "base_url": base,
        "model": name,
        "stream": False,
        "read_timeout_seconds": 10,
        "connect_timeout_seconds": 5,
        **extra,
    }


def _body(provider, model):
    return provider.build_request(
        model=model,
        messages=[{"role": "user", "content": "go"}],
        tools=[],
        tool_choice="auto",
        parallel_tool_calls=True,
    )


@pytest.mark.parametrize("style", ["standard", "repeat_id_name", "single_chunk_args"])
def test_streamed_tool_calls_assemble_to_the_plain_answer(fake_llm, style):
    name = fake_llm.script(
        f"stream-{style}",
        {
            "defaults": {"stream_style": style},
            "scenarios": [
                {
                    "match": ".",
                    "steps": [
                        {
                            "content": "先查天气，再规划路线。",
                            "tool_calls": [
                                {
                                    "name": "mojitianqi-DayWeather",
                                    "arguments": {"city": "成都市", "start_time": "2026年03月01日"},
                                },
                                {
                                    "name": "gaodedetu-plan_bicycle",
                                    "arguments": {"origin": "成都南站", "destination": "成都动物园"},
                                },
                            ],
                            "usage": {
                                "prompt_tokens": 906,
                                "completion_tokens": 48,
                                "cached_tokens": 100,
                                "reasoning_tokens": 7,
                            },
                        }
                    ],
                }
            ],
        },
    )
    provider = get_provider("openai_compatible")
    plain = provider.send(
        model=_model(fake_llm.api_base, name), api_key="", body=_body(provider, _model(fake_llm.api_base, name))
    )
    deltas = []
    streamed_model = _model(fake_llm.api_base, name, stream=True)
    streamed = provider.send(
        model=streamed_model, api_key="k", body=_body(provider, streamed_model), on_delta=deltas.append
    )

    assert [(c.id, c.name, c.arguments) for c in streamed.tool_calls] == [
        (c.id, c.name, c.arguments) for c in plain.tool_calls
    ]
    assert streamed.content == plain.content == "".join(deltas) and len(deltas) > 1
    assert streamed.finish_reason == plain.finish_reason == "tool_calls"
    assert streamed.usage == plain.usage
    assert (plain.usage.cached_tokens, plain.usage.reasoning_tokens) == (100, 7)


def test_seed_000_dialect_stop_reason_and_no_ids(fake_llm):
    name = fake_llm.script(
        "doubao",
        {
            "defaults": {"finish_field": "stop_reason", "omit_tool_call_ids": True},
            "scenarios": [{"match": ".", "steps": [{"tool_calls": [{"name": "t", "arguments": {}}]}]}],
        },
    )
    provider = get_provider("openai_compatible")
    response = provider.send(
        model=_model(fake_llm.api_base, name), api_key="", body=_body(provider, _model(fake_llm.api_base, name))
    )
    assert response.finish_reason == "tool_calls" and response.tool_calls[0].id == ""


def test_missing_usage_is_estimated_and_marked(fake_llm):
    name = fake_llm.script(
        "no-usage", {"scenarios": [{"match": ".", "steps": [{"content": "hello there", "usage": None}]}]}
    )
    provider = get_provider("openai_compatible")
    response = provider.send(
        model=_model(fake_llm.api_base, name), api_key="", body=_body(provider, _model(fake_llm.api_base, name))
    )
    assert response.usage.estimated and response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0


@pytest.mark.parametrize(
    "fault,retryable",
    [
        ({"status": 429, "retry_after": 2}, True),
        ({"status": 503}, True),
        ({"status": 401}, False),
        ({"kind": "malformed_json"}, True),
    ],
)
def test_errors_say_whether_to_retry(fake_llm, fault, retryable):
    name = fake_llm.script(
        f"fault-{fault.get('status', fault.get('kind'))}",
        {"scenarios": [{"match": ".", "steps": [{"content": "x", "fault": fault}]}]},
    )
    provider = get_provider("openai_compatible")
    with pytest.raises(ProviderError) as error:
        provider.send(
            model=_model(fake_llm.api_base, name), api_key="", body=_body(provider, _model(fake_llm.api_base, name))
        )
    assert error.value.retryable is retryable
    if "retry_after" in fault:
        assert error.value.retry_after == 2


def test_cut_stream_is_a_retryable_error_not_a_half_answer(fake_llm):
    name = fake_llm.script(
        "cut",
        {"scenarios": [{"match": ".", "steps": [{"content": "a long answer " * 20, "fault": {"kind": "cut_stream"}}]}]},
    )
    provider = get_provider("openai_compatible")
    model = _model(fake_llm.api_base, name, stream=True)
    with pytest.raises(ProviderError) as error:
        provider.send(model=model, api_key="", body=_body(provider, model))
    assert error.value.retryable and "before the answer was complete" in error.value.message
