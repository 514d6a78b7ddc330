"""Token estimates, for servers that report no usage: calibrated against real tokenisers, and
visible as estimates on the run, its steps and in the admin.

The fake model server counts with the real cl100k_base and o200k_base tokenisers when a script
asks it to (`defaults.token_counting`), so the same request sent to a script that reports usage
and to one that reports none gives the real count and the platform's estimate side by side."""

import json

import pytest

from agents.providers import get_provider
from conversations.models import LLMCall
from conversations.services import conversation_create
from tests.support.api import client_for
from tests.support.factories import make_user
from tests.support.llm import agent_on, assert_totals_match_calls
from tests.support.runs import ask

pytestmark = pytest.mark.django_db

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather forecast for a city and a date.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name, e.g. Berlin or 成都市"},
            "date": {"type": "string", "description": "YYYY-MM-DD"},
        },
        "required": ["city"],
    },
}
FORECAST = json.dumps(
    {
        "city": "Berlin",
        "date": "2026-03-01",
        "hourly": [
            {"hour": h, "temp_c": 10 + h % 5, "rain_mm": round(0.2 * h, 1), "wind": "NE 12 km/h"} for h in range(8)
        ],
    }
)
CALL = [
    {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Berlin", "date": "2026-03-01"}'},
    }
]

CONVERSATIONS = {
    "english": (
        [
            {"role": "system", "content": "You are a helpful travel assistant. Answer briefly and mention sources."},
            {
                "role": "user",
                "content": "Please look up the weather in Berlin for tomorrow and tell me whether I need "
                "an umbrella when I walk to the office at 8 am.",
            },
        ],
        "Light rain is likely around 8 am, so take an umbrella; it clears up by noon.",
    ),
    "chinese": (
        [
            {"role": "system", "content": "你是智能客服。今天是 2026年02月28日 15时05分30秒 星期六 。"},
            {
                "role": "user",
                "content": "成都明天天气怎么样？我想从成都南站骑车去成都动物园，请帮我规划路线并告诉我要多久。",
            },
        ],
        "成都明天多云，气温10到18度，东北风二级。骑行约14.9公里，需要85分钟左右。",
    ),
    "tool_result": (
        [
            {"role": "user", "content": "Will it rain in Berlin tomorrow?"},
            {"role": "assistant", "content": "", "tool_calls": CALL},
            {"role": "tool", "tool_call_id": "call_1", "content": FORECAST},
        ],
        "Yes: about 1.4 mm of rain by the afternoon, mostly after 3 pm.",
    ),
}


def _prompt_and_completion(fake_llm, name: str, messages: list[dict], tools: list[dict]):
    provider = get_provider("openai_compatible")
    model = {
        "base_url": fake_llm.api_base,
        "model": name,
        "stream": False,
        "read_timeout_seconds": 10,
        "connect_timeout_seconds": 5,
    }
    body = provider.build_request(
        model=model, messages=messages, tools=tools, tool_choice="auto", parallel_tool_calls=True
    )
    usage = provider.send(model=model, api_key="", body=body).usage
    return usage.prompt_tokens, usage.completion_tokens, usage.estimated


@pytest.mark.parametrize("counting", ["cl100k_base", "o200k_base"])
def test_estimates_track_a_real_tokeniser(fake_llm, counting):
    pairs = []
    for label, (messages, answer) in CONVERSATIONS.items():
        tools = [WEATHER_TOOL] if label == "tool_result" else []
        reported = fake_llm.script(
            f"real-{counting}-{label}", {"defaults": {"token_counting": counting}, "fallback": {"content": answer}}
        )
        silent = fake_llm.script(f"none-{counting}-{label}", {"fallback": {"content": answer, "usage": None}})
        real = _prompt_and_completion(fake_llm, reported, messages, tools)
        guess = _prompt_and_completion(fake_llm, silent, messages, tools)
        assert (real[2], guess[2]) == (False, True)
        pairs += [(label, "prompt", guess[0], real[0]), (label, "completion", guess[1], real[1])]

    # Each estimate within -20 % / +50 % of the real count: one rule of a token per CJK character
    # cannot be closer to both tokenisers (cl100k spends ~1.2 tokens a character, o200k ~0.85)…
    for label, part, guess, real in pairs:
        assert 0.8 * real <= guess <= 1.5 * real, (label, part, guess, real)
    # …and overall not low: a budget or a window sized by estimates must not be overrun.
    assert sum(p[2] for p in pairs) >= sum(p[3] for p in pairs)


def test_estimated_usage_shows_on_the_run_its_steps_and_in_the_admin(fake_llm, admin_client):
    script = {
        "scenarios": [
            {
                "match": r"echo (?P<word>\w+)",
                "steps": [
                    {
                        "tool_calls": [{"name": "test-echo", "arguments": {"text": "{word}"}}],
                        "usage": {"prompt_tokens": 50, "completion_tokens": 5},
                    },
                    {"content": "You said {last_tool_result}.", "usage": None},
                ],
            }
        ]
    }
    agent = agent_on(fake_llm, script)
    user = make_user()
    run = ask(agent, "echo hi", conversation_create(agent=agent, owner=user))
    assert_totals_match_calls(run)
    assert run.usage_estimated

    client = client_for(user)
    body = client.get(f"/api/v1/runs/{run.pk}/").json()
    assert body["usage"]["estimated"] is True and body["usage"]["total_tokens"] == run.total_tokens
    steps = client.get(f"/api/v1/runs/{run.pk}/steps/").json()["results"]
    assert [s["usage"]["estimated"] for s in steps if s["kind"] == "llm_call"] == [False, True]

    other = agent_on(fake_llm, {"fallback": {"content": "ok", "usage": {"prompt_tokens": 9}}}, tools=[])
    exact = ask(other, "hi", conversation_create(agent=other, owner=user))
    assert client.get(f"/api/v1/runs/{exact.pk}/").json()["usage"]["estimated"] is False

    page = admin_client.get("/admin/conversations/run/").content.decode()
    # The estimated run is marked; the exact one's cell stays blank.
    estimated_row = page.split(f'title="{run.pk}"')[1].split("</tr>")[0]
    exact_row = page.split(f'title="{exact.pk}"')[1].split("</tr>")[0]
    assert ">≈</span>" in estimated_row and '<td class="field-estimated"></td>' in exact_row
    page = admin_client.get("/admin/conversations/llmcall/?usage_estimated__exact=1").content.decode()
    assert f">{LLMCall.objects.get(run=run, usage_estimated=True).pk}<" in page


def _usage(fake_llm, provider: str, name: str, messages: list[dict], tools: list[dict], *, stream: bool):
    adapter = get_provider(provider)
    model = {
        "base_url": fake_llm.api_base,
        "model": name,
        "stream": stream,
        "read_timeout_seconds": 10,
        "connect_timeout_seconds": 5,
    }
    body = adapter.build_request(
        model=model, messages=messages, tools=tools, tool_choice="auto", parallel_tool_calls=True
    )
    return adapter.send(model=model, api_key="", body=body).usage


@pytest.mark.parametrize("provider", ["openai_compatible", "anthropic"])
def test_a_streamed_call_without_usage_is_estimated_as_a_plain_one(fake_llm, provider):
    """Prompt tokens of a stream that reports none are counted as for an unstreamed answer with
    none: the messages with their framing and the tool definitions, by the calibrated rule."""
    messages, answer = CONVERSATIONS["tool_result"]
    messages = [CONVERSATIONS["english"][0][0], *messages]
    no_stream_usage = fake_llm.script(
        f"no-stream-usage-{provider}", {"defaults": {"stream_usage": False}, "fallback": {"content": answer}}
    )
    no_usage = fake_llm.script(f"no-usage-{provider}", {"fallback": {"content": answer, "usage": None}})
    real = fake_llm.script(
        f"cl100k-{provider}", {"defaults": {"token_counting": "cl100k_base"}, "fallback": {"content": answer}}
    )

    # OpenAI's format: a stream without its usage chunk; Anthropic's: events without usage.
    streamed = _usage(
        fake_llm,
        provider,
        no_stream_usage if provider == "openai_compatible" else no_usage,
        messages,
        [WEATHER_TOOL],
        stream=True,
    )
    plain = _usage(fake_llm, provider, no_usage, messages, [WEATHER_TOOL], stream=False)
    counted = _usage(fake_llm, provider, real, messages, [WEATHER_TOOL], stream=False)

    assert streamed.estimated and plain.estimated and not counted.estimated
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (plain.prompt_tokens, plain.completion_tokens)
    # Not a third low: within the calibration's bounds of what the real tokeniser counts.
    assert 0.8 * counted.prompt_tokens <= streamed.prompt_tokens <= 1.5 * counted.prompt_tokens
