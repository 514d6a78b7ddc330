"""The demo script after a reviewer's decision or a failed tool: each answer reads as a sentence
(no empty placeholders), says what happened, and names what the tool really ran with."""

from __future__ import annotations

import json

import httpx
import pytest

from fakellm.testing import serve_in_thread

HTTP = httpx.Client(timeout=10)
SYSTEM = {"role": "system", "content": "今天是 2026年02月28日 15时05分30秒 星期六 。"}
BEIJING = {
    "data": [
        {
            "wind_dir_day": "西北风",
            "wind_level_day": "3",
            "temp_high": 8,
            "condition": "晴",
            "predict_date": "2026-03-02",
            "temp_low": -3,
            "humidity": 30,
        }
    ]
}
CHENGDU = {"data": [{**BEIJING["data"][0], "condition": "多云", "temp_low": 10, "temp_high": 18}]}


def rejected(tool: str, reason: str) -> str:
    return f"A reviewer rejected this call of {tool}; it was not run. Reason: {reason}."


def edited(arguments: dict, result: dict) -> str:
    ran_with = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return (
        f"[A reviewer changed the arguments before approving; the tool ran with {ran_with}]\n"
        f"{json.dumps(result, ensure_ascii=False, separators=(',', ':'))}"
    )


@pytest.fixture(scope="module")
def url():
    base_url, stop = serve_in_thread()
    yield base_url
    stop()


def ask(url: str, messages: list[dict]) -> dict:
    response = HTTP.post(f"{url}/v1/chat/completions", json={"model": "demo", "messages": messages})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]


def answer_after(url: str, question: str, results: list[str]) -> str:
    """The demo's reply once its tool calls, one per step, got these results."""
    messages = [SYSTEM, {"role": "user", "content": question}]
    for result in results:
        message = ask(url, messages)
        assert message.get("tool_calls"), message
        # The demo sends no call ids (as seed 000's model); results follow by position.
        messages += [message, {"role": "tool", "content": result}]
    message = ask(url, messages)
    assert not message.get("tool_calls")
    return message["content"]


WEATHER = "我在成都，明天天气如何？"
TRIP = "我在成都南站，明天要去成都动物园。如果明天下雨，请帮我规划一下驾驶路线。如果明天不下雨，给我规划一下骑行路线。"


def test_weather_rejected_says_so_with_the_reason(url):
    answer = answer_after(url, WEATHER, [rejected("mojitianqi-DayWeather", "今天不查天气")])
    assert answer == "抱歉，查询成都明天天气的请求没有通过审核（理由：今天不查天气），所以我没能查到天气。"


def test_weather_edited_answers_for_the_city_that_was_queried(url):
    arguments = {"city": "北京市", "start_time": "2026年03月02日", "end_time": "2026年03月02日"}
    answer = answer_after(url, WEATHER, [edited(arguments, BEIJING)])
    assert answer == (
        "审核人修改了查询条件，以下按修改后的条件作答：北京市（2026年03月02日）的天气为晴，西北风 3 级，"
        "气温 -3℃到 8℃，湿度 30%。"
    )


def test_weather_tool_error_is_passed_on(url):
    answer = answer_after(url, WEATHER, ["参数city不能为空，请提供城市名后再重试。"])
    assert answer == "抱歉，我没能查到成都明天的天气：参数city不能为空，请提供城市名后再重试。"


def test_unedited_weather_keeps_seed_000s_answer(url):
    answer = answer_after(url, WEATHER, [json.dumps(CHENGDU, ensure_ascii=False)])
    assert answer == "明天（2026年03月01日）成都的天气为多云，西北风 3 级，气温 10℃到 18℃，湿度 30%。"


def test_trip_stops_without_a_route_when_the_weather_was_rejected(url):
    answer = answer_after(url, TRIP, [rejected("mojitianqi-DayWeather", "none given")])
    assert answer.startswith("抱歉，查询成都明天天气的请求没有通过审核（理由：none given）。")
    assert "没有规划路线" in answer


def test_trip_with_an_edited_weather_city_and_route(url):
    route = {
        "mode": "bicycle",
        "origin": "北京南站",
        "destination": "北京动物园",
        "distance_m": 9000,
        "duration_s": 3103,
        "duration_text": "52 分钟",
        "steps": ["从北京南站出发，骑行 2250 米"],
    }
    weather_args = {"city": "北京市", "start_time": "2026年03月01日", "end_time": "2026年03月01日"}
    route_args = {"origin": "北京南站", "destination": "北京动物园"}
    answer = answer_after(url, TRIP, [edited(weather_args, BEIJING), edited(route_args, route)])
    assert answer == (
        "根据明天（2026年03月01日）北京市的天气情况（晴，气温 -3℃到 8℃），适合骑行，以下是为您规划的骑行路线："
        "从北京南站到北京动物园，全程约 9000 米，预计用时约 52 分钟。途经：从北京南站出发，骑行 2250 米。祝您骑行愉快！"
    )


def test_trip_with_a_rejected_route_still_gives_the_weather(url):
    answer = answer_after(
        url, TRIP, [json.dumps(CHENGDU, ensure_ascii=False), rejected("gaodedetu-plan_bicycle", "不许出门")]
    )
    assert answer == (
        "明天（2026年03月01日）成都市的天气为多云，气温 10℃到 18℃。不过规划路线的请求没有通过审核（理由：不许出门），"
        "所以这次没有给出路线。"
    )


def test_branch_groups_and_arguments_work_over_anthropic_too(url):
    messages = [{"role": "user", "content": WEATHER}]
    body = {"model": "demo", "max_tokens": 256, "system": SYSTEM["content"]}
    first = HTTP.post(f"{url}/v1/messages", json={**body, "messages": messages}).json()
    [use] = [b for b in first["content"] if b["type"] == "tool_use"]
    arguments = {**use["input"], "city": "北京市"}
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": edited(arguments, BEIJING)}
    messages += [{"role": "assistant", "content": first["content"]}, {"role": "user", "content": [result]}]
    final = HTTP.post(f"{url}/v1/messages", json={**body, "messages": messages}).json()
    assert final["content"][0]["text"].startswith(
        "审核人修改了查询条件，以下按修改后的条件作答：北京市（2026年03月01日）的天气为晴"
    )
