"""Tests for the shipped fake LLM server (fakellm). No Django involved."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from fakellm.loader import load_default_scripts
from fakellm.testing import serve_in_thread

SYSTEM_PROMPT = "你是智能客服。今天是 2026年02月28日 15时05分30秒 星期六 。"
SUNNY = {
    "data": [
        {
            "wind_dir_day": "东北风",
            "wind_level_day": "2",
            "temp_high": 18,
            "condition": "多云",
            "wind_dir_night": "东北风",
            "predict_date": "2026-03-01",
            "weather_day": "多云",
            "wind_level_night": "2",
            "temp_low": 10,
            "humidity": 76,
        }
    ]
}
RAINY = {"data": [{**SUNNY["data"][0], "condition": "小雨", "temp_low": 8, "temp_high": 12}]}


def route(mode: str) -> dict:
    return {
        "mode": mode,
        "origin": "x",
        "destination": "y",
        "distance_m": 14900,
        "duration_s": 5076,
        "steps": ["沿天府大道直行"],
    }


BASIC = {
    "scenarios": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [
                {
                    "content": "Checking {city}",
                    "tool_calls": [
                        {
                            "name": "get_weather",
                            "arguments": {"city": "{city}", "days": ["{today}", "{tomorrow}"], "n": 2},
                        }
                    ],
                },
                {
                    "branches": [
                        {
                            "if_last_tool_result_matches": "rain",
                            "then": {"content": "Umbrella: {tool:now.desc} in {city}"},
                        }
                    ],
                    "else": {"content": "Sunny: {tool:now.desc}; raw={last_tool_result}"},
                },
            ],
        },
        {"match": "loop", "steps": [{"content": "again", "tool_calls": [{"name": "spin"}]}]},
        {
            "match": "which tool",
            "steps": [
                {"tool_calls": [{"name": "a"}, {"name": "b"}]},
                {
                    "branches": [{"if_last_tool_name": "b", "then": {"content": "last was b"}}],
                    "else": {"content": "last was not b"},
                },
            ],
        },
        {
            "match": "braces",
            "steps": [{"content": '{"json": {unknown}} [{tool:missing.path}] {0} {} {last_user_message}'}],
        },
        {
            "match": "raw args",
            "steps": [
                {
                    "tool_calls": [
                        {"name": "f", "arguments": '{"a": 1'},
                        {"name": "g", "arguments": '{"b": [2]}', "id": "fixed-id"},
                    ]
                }
            ],
        },
        {"match": "no usage", "steps": [{"content": "x", "usage": None}]},
        {"match": "computed usage", "steps": [{"content": "abcdefgh"}]},
        {
            "match": "partial usage",
            "steps": [
                {
                    "content": "x",
                    "usage": {"prompt_tokens": 100, "completion_tokens": 7, "cached_tokens": 40, "reasoning_tokens": 3},
                }
            ],
        },
        {"match": "override", "steps": [{"content": "cut short", "finish_reason": "length"}]},
    ]
}
FAULTS = {
    "faults": {"timeout_ms": 300},
    "scenarios": [
        {"match": "flaky", "steps": [{"content": "recovered", "fault": {"status": 500, "times": 1}}]},
        {"match": "limited", "steps": [{"content": "no", "fault": {"status": 429, "retry_after": 2}}]},
        {"match": "garbage", "steps": [{"content": "no", "fault": {"kind": "malformed_json"}}]},
        {
            "match": "cut",
            "steps": [
                {
                    "content": "a fairly long reply that streams in many pieces",
                    "tool_calls": [{"name": "t", "arguments": {"k": "v"}}],
                    "fault": {"kind": "cut_stream"},
                }
            ],
        },
        {"match": "slow", "steps": [{"content": "late", "fault": {"kind": "timeout"}}]},
    ],
}
STREAM_REPLY = {
    "content": "Let me look that up for you.",
    "tool_calls": [
        {"name": "search", "arguments": {"q": "天气 成都", "limit": 3}},
        {"name": "lookup", "arguments": {"id": "abc-123-xyz", "tags": ["a", "b"]}},
    ],
}
STYLES = ["standard", "repeat_id_name", "single_chunk_args"]
# One shared client: building a client per request costs more than the request itself.
HTTP = httpx.Client(timeout=5, trust_env=False)


def stream_script(style: str, **defaults) -> dict:
    return {"defaults": {"stream_style": style, **defaults}, "fallback": STREAM_REPLY}


@pytest.fixture(scope="module")
def url():
    scripts = {**load_default_scripts(), "basic": BASIC, "faults": FAULTS}
    for style in STYLES:
        scripts[f"stream-{style}"] = stream_script(style)
    scripts["stream-nousage"] = stream_script("standard", stream_usage=False)
    scripts["stream-both"] = stream_script("standard", finish_field="both", omit_tool_call_ids=True)
    base_url, stop = serve_in_thread(scripts)
    yield base_url
    stop()
    HTTP.close()


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def chat(url: str, model: str, messages: list, **extra) -> httpx.Response:
    body = {"model": model, "messages": messages, **extra}
    return HTTP.post(f"{url}/v1/chat/completions", json=body, timeout=5)


def anthropic(url: str, model: str, messages: list, **extra) -> httpx.Response:
    body = {"model": model, "max_tokens": 1024, "messages": messages, **extra}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    return HTTP.post(f"{url}/v1/messages", json=body, headers=headers, timeout=5)


def message_of(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]


def tool_turn(messages: list, assistant: dict, results: list) -> list:
    """Append an assistant tool-call message and one tool message per result."""
    tool_messages = [
        {"role": "tool", "tool_call_id": call.get("id", ""), "content": json.dumps(result, ensure_ascii=False)}
        for call, result in zip(assistant["tool_calls"], results)
    ]
    return messages + [assistant] + tool_messages


def sse_data(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


def assemble_openai(text: str) -> dict:
    """Rebuild a plain completion from chunks, the way a client library would."""
    data = sse_data(text)
    assert data[-1] == "[DONE]"
    content, calls, finish, usage = "", {}, {}, None
    for chunk in map(json.loads, data[:-1]):
        assert chunk["object"] == "chat.completion.chunk"
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for part in delta.get("tool_calls", []):
                call = calls.setdefault(part["index"], {"function": {"arguments": ""}})
                for key in ("id", "type"):
                    if key in part:
                        call[key] = part[key]
                function = part.get("function", {})
                if "name" in function:
                    call["function"]["name"] = function["name"]
                call["function"]["arguments"] += function.get("arguments", "")
            finish.update({k: choice[k] for k in ("finish_reason", "stop_reason") if choice.get(k)})
    message = {"content": content, "role": "assistant"}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"message": message, "finish": finish, "usage": usage}


def assemble_anthropic(text: str) -> dict:
    events = [(block.split("\n")[0][7:], json.loads(block.split("\n")[1][6:])) for block in text.strip().split("\n\n")]
    assert [kind for kind, data in events] == [data["type"] for kind, data in events]
    message, partial = None, {}
    for kind, data in events:
        if kind == "message_start":
            message = data["message"]
        elif kind == "content_block_start":
            message["content"].append(data["content_block"])
            partial[data["index"]] = ""
        elif kind == "content_block_delta":
            block, delta = message["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                partial[data["index"]] += delta["partial_json"]
        elif kind == "content_block_stop" and message["content"][data["index"]]["type"] == "tool_use":
            message["content"][data["index"]]["input"] = json.loads(partial[data["index"]] or "{}")
        elif kind == "message_delta":
            message.update(data["delta"])
            if "usage" in data:
                message["usage"].update(data["usage"])
    assert events[-1][0] == "message_stop"
    return message


# --- control endpoints -------------------------------------------------------------------


def test_health_scripts_and_models(url):
    assert HTTP.get(f"{url}/_health").json()["status"] == "ok"
    names = HTTP.get(f"{url}/_scripts").json()
    assert {"demo", "echo", "basic", "faults"} <= set(names)
    models = HTTP.get(f"{url}/v1/models").json()
    assert models["object"] == "list"
    assert {m["id"] for m in models["data"]} == set(names)


def test_unknown_model_is_404_in_both_formats(url):
    response = chat(url, "no-such-model", [user("hi")])
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "model_not_found"
    response = anthropic(url, "no-such-model", [user("hi")])
    assert response.status_code == 404
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "not_found_error"


def test_missing_messages_is_400(url):
    response = HTTP.post(f"{url}/v1/chat/completions", json={"model": "echo"})
    assert response.status_code == 400
    assert "messages" in response.json()["error"]["message"]
    response = HTTP.post(f"{url}/v1/messages", json={"model": "echo"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "script, fragment",
    [
        ({"scenarios": [{"match": "(", "steps": [{"content": "x"}]}]}, "scenarios[0].match"),
        ({"scenarios": [{"match": "x", "steps": []}]}, "scenarios[0].steps"),
        ({"fallback": {"content": "x", "colour": "red"}}, "unknown key 'colour'"),
        ({"fallback": {"content": "x", "fault": {"status": 200}}}, "fallback.fault.status"),
        ({"fallback": {"branches": [{"then": {}}], "else": {}}}, "needs exactly one condition"),
        ({"defaults": {"stream_style": "fancy"}}, "defaults.stream_style"),
        ({"faults": {"rate": {"500": 0.8, "429": 0.8}}}, "sum to at most 1"),
        ({"fallback": {"tool_calls": [{"arguments": 3}]}}, "tool_calls[0].name"),
        ([], "JSON object"),
    ],
)
def test_put_script_rejects_malformed_scripts(url, script, fragment):
    response = HTTP.put(f"{url}/_scripts/bad", json=script)
    assert response.status_code == 400
    assert fragment in response.json()["error"]
    response = HTTP.put(f"{url}/_scripts/bad", content=b"{not json")
    assert response.status_code == 400


def test_put_script_installs_and_replaces(url):
    assert HTTP.put(f"{url}/_scripts/fresh", json={"fallback": {"content": "one"}}).status_code == 200
    assert "fresh" in HTTP.get(f"{url}/_scripts").json()
    assert message_of(chat(url, "fresh", [user("hi")]))["content"] == "one"
    HTTP.put(f"{url}/_scripts/fresh", json={"fallback": {"content": "two"}})
    assert message_of(chat(url, "fresh", [user("hi")]))["content"] == "two"


def test_request_log_filters_limits_and_clears(url):
    HTTP.put(f"{url}/_scripts/logged", json={})
    for i in range(3):
        chat(url, "logged", [user(f"message {i}")])
    anthropic(url, "logged", [user("message 3")])
    logged = HTTP.get(f"{url}/_requests", params={"model": "logged", "limit": 2}).json()
    assert [body["messages"][0]["content"] for body in logged] == ["message 2", "message 3"]
    assert logged[1]["max_tokens"] == 1024
    assert len(HTTP.get(f"{url}/_requests", params={"model": "logged"}).json()) == 4
    assert HTTP.delete(f"{url}/_requests").status_code == 200
    assert HTTP.get(f"{url}/_requests").json() == []


# --- scenario selection, steps, branches and templates ------------------------------------


def test_fallback_and_echo(url):
    assert message_of(chat(url, "basic", [user("nothing matches")]))["content"] == (
        "I have no scripted reply for that."
    )
    assert message_of(chat(url, "echo", [user("first"), user("say 你好")]))["content"] == "say 你好"


def test_steps_templates_and_branches(url):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, user("weather in Paris please")]
    first = message_of(chat(url, "basic", messages))
    assert first["content"] == "Checking Paris"
    call = first["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert json.loads(call["function"]["arguments"]) == {
        "city": "Paris",
        "days": ["2026年02月28日", "2026年03月01日"],
        "n": 2,
    }
    rainy = tool_turn(messages, first, [{"now": {"desc": "light rain"}}])
    assert message_of(chat(url, "basic", rainy))["content"] == "Umbrella: light rain in Paris"
    sunny = tool_turn(messages, first, [{"now": {"desc": "clear"}}])
    assert message_of(chat(url, "basic", sunny))["content"] == ('Sunny: clear; raw={"now": {"desc": "clear"}}')


def test_today_defaults_to_local_date(url):
    call = message_of(chat(url, "basic", [user("weather in Oslo")]))["tool_calls"][0]
    today = dt.date.today()
    expected = [d.strftime("%Y年%m月%d日") for d in (today, today + dt.timedelta(days=1))]
    assert json.loads(call["function"]["arguments"])["days"] == expected


def test_step_index_past_end_repeats_last_step(url):
    messages = [user("loop forever")]
    for _ in range(4):
        reply = message_of(chat(url, "basic", messages))
        assert reply["tool_calls"][0]["function"]["name"] == "spin"
        messages = tool_turn(messages, reply, ["ok"])


def test_branch_on_last_tool_name_matches_by_order_without_ids(url):
    messages = [user("which tool was last")]
    reply = message_of(chat(url, "basic", messages))
    for call in reply["tool_calls"]:
        del call["id"]
    messages = tool_turn(messages, reply, ["ra", "rb"])
    assert message_of(chat(url, "basic", messages))["content"] == "last was b"


def test_unknown_placeholders_and_json_braces_survive(url):
    reply = message_of(chat(url, "basic", [user("braces")]))
    assert reply["content"] == '{"json": {unknown}} [] {0} {} braces'


def test_raw_string_arguments_are_sent_verbatim(url):
    calls = message_of(chat(url, "basic", [user("raw args")]))["tool_calls"]
    assert calls[0]["function"]["arguments"] == '{"a": 1'
    assert calls[1] == {"id": "fixed-id", "type": "function", "function": {"arguments": '{"b": [2]}', "name": "g"}}
    blocks = anthropic(url, "basic", [user("raw args")]).json()["content"]
    assert [b["input"] for b in blocks] == [{}, {"b": [2]}]
    assert blocks[1]["id"] == "fixed-id"


# --- the shipped demo script --------------------------------------------------------------


def test_demo_who_are_you(url):
    body = chat(url, "demo", [user("你是谁")]).json()
    choice = body["choices"][0]
    assert choice["message"] == {
        "content": "我是强子开发的智能客服，能够为您提供信息咨询、问题解答等服务。",
        "role": "assistant",
    }
    assert choice["stop_reason"] == "stop" and "finish_reason" not in choice
    assert body["usage"]["prompt_tokens"] == 868 and body["usage"]["completion_tokens"] == 21
    assert body["usage"]["total_tokens"] == 889


def test_demo_weather_question(url):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, user("我在成都，明天天气如何")]
    response = chat(url, "demo", messages).json()
    assert response["usage"]["prompt_tokens"] == 906
    call = response["choices"][0]["message"]["tool_calls"][0]
    assert "id" not in call
    assert call["function"]["name"] == "mojitianqi-DayWeather"
    assert call["function"]["arguments"] == (
        '{"city":"成都市","start_time":"2026年03月01日","end_time":"2026年03月01日"}'
    )
    answer = message_of(chat(url, "demo", tool_turn(messages, response["choices"][0]["message"], [SUNNY])))
    assert answer["content"] == ("明天（2026年03月01日）成都的天气为多云，东北风 2 级，气温 10℃到 18℃，湿度 76%。")


@pytest.mark.parametrize(
    "place, weather, tool, mode_word",
    [
        ("成都市武侯区", SUNNY, "gaodedetu-plan_bicycle", "骑行"),
        ("重庆市渝中区", RAINY, "gaodedetu-plan_driving", "驾车"),
    ],
)
def test_demo_trip_planning_openai(url, place, weather, tool, mode_word):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, user(f"我在{place}，明天要去青城山，怎么去？")]
    first = message_of(chat(url, "demo", messages))
    assert json.loads(first["tool_calls"][0]["function"]["arguments"])["city"] == place[:2] + "市"
    messages = tool_turn(messages, first, [weather])
    second = message_of(chat(url, "demo", messages))
    assert second["tool_calls"][0]["function"]["name"] == tool
    assert json.loads(second["tool_calls"][0]["function"]["arguments"]) == {"origin": place, "destination": "青城山"}
    messages = tool_turn(messages, second, [route("driving" if "driving" in tool else "bicycle")])
    final = message_of(chat(url, "demo", messages))["content"]
    # The place named is the one the weather call asked about.
    assert final.startswith(f"根据明天（2026年03月01日）{place[:2]}市的天气情况（{weather['data'][0]['condition']}")
    assert f"{mode_word}路线" in final and "14900 米" in final and "沿天府大道直行" in final


def test_demo_trip_planning_anthropic(url):
    messages = [user("我在重庆市渝中区，明天要去洪崖洞")]
    for result in (RAINY, route("driving")):
        body = anthropic(url, "demo", messages, system=SYSTEM_PROMPT).json()
        assert body["stop_reason"] == "tool_use"
        tool_use = body["content"][-1]
        messages = messages + [
            {"role": "assistant", "content": body["content"]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tool_use["id"],
                        "content": json.dumps(result, ensure_ascii=False),
                    }
                ],
            },
        ]
    assert tool_use["name"] == "gaodedetu-plan_driving"
    body = anthropic(url, "demo", messages, system=SYSTEM_PROMPT).json()
    assert body["stop_reason"] == "end_turn"
    assert "小雨" in body["content"][0]["text"] and "驾车路线" in body["content"][0]["text"]


# --- wire formats: plain vs stream --------------------------------------------------------


@pytest.mark.parametrize("model", [f"stream-{s}" for s in STYLES] + ["stream-both"])
def test_openai_stream_reassembles_to_plain(url, model):
    messages = [user("look it up")]
    plain = chat(url, model, messages).json()
    response = chat(url, model, messages, stream=True)
    assert response.headers["content-type"].startswith("text/event-stream")
    streamed = assemble_openai(response.text)
    choice = plain["choices"][0]
    assert streamed["message"] == choice["message"]
    assert streamed["finish"] == {k: v for k, v in choice.items() if k in ("finish_reason", "stop_reason")}
    assert streamed["usage"] == plain["usage"]
    deltas = [
        part
        for chunk in map(json.loads, sse_data(response.text)[:-1])
        for c in chunk["choices"]
        for part in c["delta"].get("tool_calls", [])
    ]
    if model.endswith("repeat_id_name"):
        assert all("id" in d and "name" in d["function"] for d in deltas)
    elif model.endswith("single_chunk_args"):
        assert len(deltas) == 2
    else:
        assert len(deltas) > 4 and sum("name" in d["function"] for d in deltas) == 2
    if model == "stream-both":
        assert choice["finish_reason"] == choice["stop_reason"] == "tool_calls"
        assert all("id" not in d for d in deltas)


def test_openai_stream_text_comes_in_several_deltas_and_usage_last(url):
    data = sse_data(chat(url, "stream-standard", [user("x")], stream=True).text)
    chunks = [json.loads(d) for d in data[:-1]]
    assert sum(1 for c in chunks for ch in c["choices"] if ch["delta"].get("content")) > 3
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


def test_openai_stream_without_usage(url):
    text = chat(url, "stream-nousage", [user("x")], stream=True).text
    assert all("usage" not in json.loads(d) for d in sse_data(text)[:-1])
    assert assemble_openai(text)["usage"] is None


def test_anthropic_stream_reassembles_to_plain(url):
    messages = [user("look it up")]
    plain = anthropic(url, "stream-standard", messages).json()
    assert plain["content"][0] == {"type": "text", "text": STREAM_REPLY["content"]}
    assert plain["content"][1]["input"] == {"q": "天气 成都", "limit": 3}
    assert plain["stop_reason"] == "tool_use" and plain["stop_sequence"] is None
    assert set(plain["usage"]) == {
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    }
    response = anthropic(url, "stream-standard", messages, stream=True)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert assemble_anthropic(response.text) == plain


def test_usage_null_omits_usage_everywhere(url):
    assert "usage" not in chat(url, "basic", [user("no usage")]).json()
    text = chat(url, "basic", [user("no usage")], stream=True).text
    assert assemble_openai(text)["usage"] is None
    assert "usage" not in anthropic(url, "basic", [user("no usage")]).json()
    assert '"usage"' not in anthropic(url, "basic", [user("no usage")], stream=True).text


def test_usage_is_computed_when_missing(url):
    messages = [user("computed usage")]
    tools = [{"type": "function", "function": {"name": "x", "parameters": {}}}]
    usage = chat(url, "basic", messages, tools=tools).json()["usage"]
    prompt = math.ceil(len(json.dumps([messages, tools], ensure_ascii=False)) / 4)
    assert usage == {
        "completion_tokens": 2,
        "completion_tokens_details": {"reasoning_tokens": 0},
        "prompt_tokens": prompt,
        "prompt_tokens_details": {"cached_tokens": 0},
        "total_tokens": prompt + 2,
    }


def test_usage_details_in_both_formats(url):
    usage = chat(url, "basic", [user("partial usage")]).json()["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 40}
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3}
    usage = anthropic(url, "basic", [user("partial usage")]).json()["usage"]
    assert usage == {
        "input_tokens": 60,
        "output_tokens": 7,
        "cache_read_input_tokens": 40,
        "cache_creation_input_tokens": 0,
    }


def test_finish_reason_override_maps_per_format(url):
    assert chat(url, "basic", [user("override")]).json()["choices"][0]["finish_reason"] == "length"
    assert anthropic(url, "basic", [user("override")]).json()["stop_reason"] == "max_tokens"


def test_ids_are_deterministic(url):
    first = chat(url, "basic", [user("weather in Rome")]).json()
    again = chat(url, "basic", [user("weather in Rome")]).json()
    assert first["id"] == again["id"]
    assert first["choices"][0]["message"]["tool_calls"] == again["choices"][0]["message"]["tool_calls"]


# --- faults -------------------------------------------------------------------------------


def test_fault_times_fails_first_then_succeeds(url):
    messages = [user("flaky service")]
    failed = chat(url, "faults", messages)
    assert failed.status_code == 500
    assert failed.json()["error"]["type"] == "server_error"
    assert message_of(chat(url, "faults", messages))["content"] == "recovered"
    # A different request has its own counter.
    assert anthropic(url, "faults", [user("flaky again")]).status_code == 500
    assert anthropic(url, "faults", [user("flaky again")]).status_code == 200


def test_429_carries_retry_after(url):
    response = chat(url, "faults", [user("limited")])
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    response = anthropic(url, "faults", [user("limited")], stream=True)
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_malformed_json(url):
    for send in (chat, anthropic):
        response = send(url, "faults", [user("garbage")])
        assert response.status_code == 200
        with pytest.raises(ValueError):
            json.loads(response.text)
    data = sse_data(chat(url, "faults", [user("garbage")], stream=True).text)
    with pytest.raises(ValueError):
        json.loads(data[0])


def test_cut_stream(url):
    text = chat(url, "faults", [user("cut")], stream=True).text
    chunks = sse_data(text)
    assert 1 < len(chunks) and "[DONE]" not in chunks
    assert all(not c.get("finish_reason") for d in chunks for c in json.loads(d)["choices"])
    text = anthropic(url, "faults", [user("cut")], stream=True).text
    assert "message_start" in text and "message_stop" not in text and "message_delta" not in text
    with pytest.raises(ValueError):
        chat(url, "faults", [user("cut")]).json()


def test_timeout_fault_outlasts_the_client(url):
    with pytest.raises(httpx.ReadTimeout):
        HTTP.post(f"{url}/v1/chat/completions", timeout=0.05, json={"model": "faults", "messages": [user("slow")]})


def test_chaos_rates_are_seeded_and_reproducible(url):
    script = {"faults": {"rate": {"500": 0.5}, "seed": 7}}
    statuses = []
    for name in ("chaos-a", "chaos-b"):
        HTTP.put(f"{url}/_scripts/{name}", json=script)
        statuses.append([chat(url, name, [user(f"q{i}")]).status_code for i in range(20)])
    assert statuses[0] == statuses[1] and {200, 500} == set(statuses[0])
    HTTP.put(f"{url}/_scripts/chaos-c", json={"faults": {"rate": {"429": 1}, "retry_after": 3}})
    response = chat(url, "chaos-c", [user("q")])
    assert response.status_code == 429 and response.headers["retry-after"] == "3"


# --- holds: a test lets a model call finish when it chooses --------------------------------


def _hold(url: str, label: str) -> dict:
    return HTTP.get(f"{url}/_holds/{label}").json()


def _poll(predicate, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_held_step_is_answered_only_once_released(url):
    HTTP.put(f"{url}/_scripts/held", json={"fallback": {"content": "let go", "hold": "h-answer"}})
    with ThreadPoolExecutor(max_workers=1) as pool:
        answer = pool.submit(chat, url, "held", [user("hi")])
        _poll(lambda: _hold(url, "h-answer")["waiting"] == 1)
        time.sleep(0.2)
        assert not answer.done()
        assert HTTP.post(f"{url}/_holds/h-answer/release").json() == {"arrived": 1, "waiting": 1, "released": True}
        assert answer.result(timeout=5).json()["choices"][0]["message"]["content"] == "let go"
    assert _hold(url, "h-answer") == {"arrived": 1, "waiting": 0, "released": True}
    # Released stays released: a later request passes at once.
    assert chat(url, "held", [user("again")]).status_code == 200
    assert _hold(url, "h-answer")["arrived"] == 2


def test_a_release_before_the_request_arrives_is_not_lost(url):
    HTTP.post(f"{url}/_holds/h-early/release")
    HTTP.put(f"{url}/_scripts/held-early", json={"fallback": {"content": "at once", "hold": "h-early"}})
    assert chat(url, "held-early", [user("hi")]).json()["choices"][0]["message"]["content"] == "at once"


def test_a_hold_nobody_releases_is_answered_after_its_timeout(url):
    script = {"defaults": {"hold_timeout_ms": 300}, "fallback": {"content": "anyway", "hold": "h-forgotten"}}
    HTTP.put(f"{url}/_scripts/held-forgotten", json=script)
    assert chat(url, "held-forgotten", [user("hi")]).json()["choices"][0]["message"]["content"] == "anyway"
    assert _hold(url, "h-forgotten") == {"arrived": 1, "waiting": 0, "released": False}


@pytest.mark.parametrize("label", ["", "a b", "x" * 101, 7])
def test_a_hold_label_is_a_short_plain_name(url, label):
    response = HTTP.put(f"{url}/_scripts/bad-hold", json={"fallback": {"content": "x", "hold": label}})
    assert response.status_code == 400
    assert "fallback.hold" in response.json()["error"]


def test_the_hold_endpoints_refuse_a_label_no_step_could_name(url):
    assert HTTP.get(f"{url}/_holds/{'x' * 101}").status_code == 400
    assert HTTP.post(f"{url}/_holds/a%20b/release").status_code == 400


# --- performance and entry points ---------------------------------------------------------


def test_many_concurrent_slow_requests(url):
    """Slow replies overlap instead of queueing behind each other: the server's own count of
    requests answered at once says so (a wall-clock limit would fail on a busy machine)."""
    HTTP.put(f"{url}/_scripts/slow", json={"defaults": {"latency_ms": 200}, "fallback": {"content": "done"}})
    # Replies an earlier test gave up on may still be waiting out their latency: start idle.
    deadline = time.monotonic() + 30
    while HTTP.get(f"{url}/_stats").json()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    HTTP.delete(f"{url}/_requests")
    assert HTTP.get(f"{url}/_stats").json() == {"in_flight": 0, "max_in_flight": 0}

    async def burst() -> list[int]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10, trust_env=False) as client:
            body = {"model": "slow", "messages": [user("hi")]}
            responses = await asyncio.gather(*(client.post("/v1/chat/completions", json=body) for _ in range(150)))
        return [r.status_code for r in responses]

    assert asyncio.run(burst()) == [200] * 150
    stats = HTTP.get(f"{url}/_stats").json()
    assert stats["in_flight"] == 0
    assert stats["max_in_flight"] > 1
    assert len(HTTP.get(f"{url}/_requests", params={"model": "slow", "limit": 1000}).json()) == 150


def test_command_line_entry_point(tmp_path: Path):
    script = tmp_path / "custom.json"
    script.write_text(json.dumps({"fallback": {"content": "from cli"}}))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "fakellm", "--host", "127.0.0.1", "--port", str(port), "--script", f"custom={script}"],
        cwd=Path(__file__).resolve().parents[2],
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                names = HTTP.get(f"{base}/_scripts").json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.05)
        assert {"custom", "demo", "echo"} <= set(names)
        assert message_of(chat(base, "custom", [user("x")]))["content"] == "from cli"
    finally:
        process.terminate()
        process.wait(timeout=10)
