"""A scenario's needs_description: an offered tool whose description lacks the words the
scenario needs is not understood, and the fake model answers without calling it."""

from __future__ import annotations

import httpx
import pytest

from fakellm.testing import serve_in_thread

HTTP = httpx.Client(timeout=10)
SYSTEM = {"role": "system", "content": "今天是 2026年02月28日 15时05分30秒 星期六 。"}
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}}


def offered(name: str, description: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": PARAMS}}


@pytest.fixture(scope="module")
def url():
    base_url, stop = serve_in_thread()
    yield base_url
    stop()


def ask(url: str, question: str, tools: list[dict]) -> dict:
    body = {"model": "demo", "messages": [SYSTEM, {"role": "user", "content": question}], "tools": tools}
    response = HTTP.post(f"{url}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]


def test_a_described_weather_tool_is_called(url):
    message = ask(url, "我在成都，明天天气如何？", [offered("mojitianqi-DayWeather", "获取国内指定日期的天气。")])
    assert [call["function"]["name"] for call in message["tool_calls"]] == ["mojitianqi-DayWeather"]


def test_a_vague_weather_tool_is_not_understood(url):
    message = ask(url, "我在成都，明天天气如何？", [offered("mojitianqi-DayWeather", "Returns data.")])
    assert not message.get("tool_calls")
    assert message["content"] == "抱歉，我无法查询天气。"


def test_the_route_question_needs_every_route_tool_described(url):
    tools = [
        offered("mojitianqi-DayWeather", "获取国内指定日期的天气。"),
        offered("gaodedetu-plan_driving", "驾驶路线规划"),
        offered("gaodedetu-plan_bicycle", "Plans something."),
    ]
    question = "我在成都南站，明天要去成都动物园。如果明天下雨，请帮我规划一下驾驶路线。"
    message = ask(url, question, tools)
    assert not message.get("tool_calls")
    assert message["content"].startswith("抱歉，我无法查询天气")
    tools[2] = offered("gaodedetu-plan_bicycle", "骑行路线规划")
    assert ask(url, question, tools)["tool_calls"][0]["function"]["name"] == "mojitianqi-DayWeather"


def test_a_tool_not_offered_is_not_checked(url):
    # Without the tool in the request the scenario plays as scripted (the engine reports the call).
    message = ask(url, "我在成都，明天天气如何？", [offered("other", "Returns data.")])
    assert message["tool_calls"][0]["function"]["name"] == "mojitianqi-DayWeather"
