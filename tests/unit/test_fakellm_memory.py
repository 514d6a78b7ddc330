"""The fake model's side of long-term memory (fakellm/memory.py): it answers the engine's memory
extraction call like a careful extractor, and the demo script asks the weather for the city a
memory it was shown names, instead of asking where. No server: the app is called in process."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from fakellm.app import create_app
from fakellm.conversation import from_anthropic, from_openai
from fakellm.loader import load_default_scripts
from fakellm.memory import MEMORY_CLOSE, MEMORY_OPEN, extraction_changes, said_in, shown_memories
from fakellm.script import Script
from fakellm.validation import ScriptError

SCRIPTS = load_default_scripts()
SYSTEM = "今天是 2026年02月28日 15时05分30秒 星期六 。# 角色\n你是一名强子开发的智能客服。\n\n"
EXTRACTION_PROMPT = "[memory-extraction]\nPropose changes to the memories held about this user."
CHENGDU = {"id": "0b6f0d1e-0000-4000-8000-000000000001", "kind": "fact", "statement": "住在成都"}


def user(*texts: str) -> list[dict]:
    return [{"role": "user", "content": text} for text in texts]


def extraction(conversation: list[dict], held=(), kinds=("fact", "preference", "event", "instruction")) -> dict:
    """The engine's extraction request body (engine/memory.py's contract)."""
    payload = {"kinds": list(kinds), "held": list(held), "conversation": conversation}
    return {
        "model": "demo",
        "messages": [
            {"role": "system", "content": EXTRACTION_PROMPT},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=False)},
        ],
    }


def memory_block(*statements: str) -> str:
    """The engine's memory block (engine/memory.py's memory_message): delimited, a heading, and
    each statement quoted as a JSON string after its kind."""
    quoted = [f"- fact: {json.dumps(s, ensure_ascii=False)}" for s in statements]
    return "\n".join([MEMORY_OPEN, "Notes about this user.", *quoted, MEMORY_CLOSE])


def memory_message(*statements: str) -> dict:
    return {"role": "user", "content": memory_block(*statements)}


def post(path: str, body: dict, scripts: dict | None = None) -> httpx.Response:
    async def call():
        transport = httpx.ASGITransport(app=create_app(SCRIPTS if scripts is None else scripts))
        async with httpx.AsyncClient(transport=transport, base_url="http://fakellm") as client:
            return await client.post(path, json=body)

    return asyncio.run(call())


def openai_message(body: dict, scripts: dict | None = None) -> dict:
    response = post("/v1/chat/completions", body, scripts)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]


def changes(body: dict) -> list[dict]:
    return json.loads(openai_message(body)["content"])["changes"]


@pytest.mark.parametrize(
    "text, statements",
    [
        ("我在成都", ["住在成都"]),
        ("我住在成都。", ["住在成都"]),
        ("我在成都，明天天气如何？", ["住在成都"]),
        ("我在成都市，明天天气如何？", ["住在成都"]),
        ("我现在在北京", ["住在北京"]),
        ("我搬到重庆了", ["住在重庆"]),
        ("我搬到了重庆！", ["住在重庆"]),
        ("我住在绵阳市", ["住在绵阳"]),
        ("I live in Chengdu", ["Lives in Chengdu"]),
        ("I moved to New York.", ["Lives in New York"]),
        ("我喜欢猫", ["喜欢猫"]),
        ("我不喜欢香菜", ["不喜欢香菜"]),
        ("I like jazz and I live in Chengdu", ["Likes jazz", "Lives in Chengdu"]),
        ("请用英文回答", ["用英文回答"]),
        ("Please answer in english.", ["Answer in English"]),
        # Where the user is, not where they live; a place that is no city; said of nothing.
        ("我在成都南站，明天要去成都动物园。", []),
        ("我在成都出差", []),
        ("我在家", []),
        ("I like it", []),
        ("我喜欢的城市是成都", []),
        ("I lived in Paris", []),
        ("明天天气如何？", []),
    ],
)
def test_what_a_user_turn_states(text, statements):
    assert [said.statement for said in said_in(text)] == statements


def test_a_new_city_is_added():
    assert extraction_changes({"kinds": [], "held": [], "conversation": user("我在成都")}) == [
        {"action": "add", "kind": "fact", "statement": "住在成都"}
    ]


def test_a_move_updates_the_held_city_by_its_id():
    request = {"kinds": ["fact"], "held": [CHENGDU], "conversation": user("我搬到重庆了")}
    assert extraction_changes(request) == [
        {"action": "update", "id": CHENGDU["id"], "kind": "fact", "statement": "住在重庆"}
    ]


def test_the_same_city_again_is_kept_not_stored_twice():
    request = {"kinds": [], "held": [CHENGDU], "conversation": user("我在成都", "我住在成都。")}
    assert extraction_changes(request) == [{"action": "keep", "id": CHENGDU["id"]}]


def test_the_last_word_on_a_topic_counts_and_the_assistant_is_not_the_user():
    conversation = [
        *user("我在成都"),
        {"role": "assistant", "content": "好的，您在北京。我喜欢猫。"},
        *user("不对，我搬到重庆了，我喜欢火锅"),
    ]
    assert extraction_changes({"kinds": [], "held": [], "conversation": conversation}) == [
        {"action": "add", "kind": "fact", "statement": "住在重庆"},
        {"action": "add", "kind": "preference", "statement": "喜欢火锅"},
    ]


def test_a_changed_liking_and_language_replace_the_held_ones():
    held = [
        {"id": "a", "kind": "preference", "statement": "喜欢香菜"},
        {"id": "b", "kind": "instruction", "statement": "用中文回答"},
        {"id": "c", "kind": "fact", "statement": "有一只猫"},
    ]
    request = {"kinds": [], "held": held, "conversation": user("我不喜欢香菜了。请用英文回答")}
    assert extraction_changes(request) == [
        {"action": "update", "id": "a", "kind": "preference", "statement": "不喜欢香菜"},
        {"action": "update", "id": "b", "kind": "instruction", "statement": "用英文回答"},
    ]


def test_kinds_not_asked_for_are_left_out():
    request = {"kinds": ["preference"], "held": [], "conversation": user("我在成都，我喜欢猫")}
    assert extraction_changes(request) == [{"action": "add", "kind": "preference", "statement": "喜欢猫"}]


@pytest.mark.parametrize(
    "request_",
    [
        None,
        [],
        "我在成都",
        {"conversation": "我在成都"},
        {"conversation": [{"role": "user", "content": ["我在成都"]}], "held": "x"},
        {"conversation": [], "held": [{"statement": "住在成都"}]},
    ],
)
def test_a_request_not_of_the_expected_shape_gets_no_change(request_):
    assert extraction_changes(request_) == []


def test_a_held_statement_without_an_id_is_not_updated():
    request = {"kinds": [], "held": [{"statement": "住在成都"}, 3], "conversation": user("我搬到重庆了")}
    assert extraction_changes(request) == [{"action": "add", "kind": "fact", "statement": "住在重庆"}]


def test_the_demo_model_answers_an_extraction_with_the_json_of_the_contract():
    body = extraction(user("我搬到重庆了") + [{"role": "assistant", "content": "好的"}], held=[CHENGDU])
    assert changes(body) == [{"action": "update", "id": CHENGDU["id"], "kind": "fact", "statement": "住在重庆"}]


def test_an_extraction_is_not_read_as_the_question_it_quotes():
    # The conversation quoted holds the weather question, which a scenario would answer.
    body = extraction(user("我在成都，明天天气如何？") + [{"role": "assistant", "content": "多云"}])
    assert changes(body) == [{"action": "add", "kind": "fact", "statement": "住在成都"}]


def test_an_extraction_of_nothing_is_an_empty_list_and_garbage_is_no_change():
    assert changes(extraction(user("你是谁？"))) == []
    body = extraction([])
    body["messages"][1]["content"] = "not json"
    assert changes(body) == []


def test_the_anthropic_wire_answers_an_extraction_too():
    body = extraction(user("我在成都"))
    response = post(
        "/v1/messages",
        {"model": "demo", "max_tokens": 200, "system": EXTRACTION_PROMPT, "messages": body["messages"][1:]},
    )
    assert response.status_code == 200, response.text
    text = response.json()["content"][0]["text"]
    assert json.loads(text) == {"changes": [{"action": "add", "kind": "fact", "statement": "住在成都"}]}


def test_a_script_without_memory_extraction_answers_an_extraction_from_its_scenarios():
    # Tests script malformed extractions this way: the rules answer only when a script asks.
    scripts = {"demo": {"scenarios": [{"match": "held", "steps": [{"content": "not json"}]}]}}
    assert openai_message(extraction(user("我在成都")), scripts)["content"] == "not json"


def test_a_memory_extraction_step_may_be_scripted_like_any_step():
    scripts = {"demo": {"memory_extraction": {"content": '{"changes": "oops"}'}}}
    assert openai_message(extraction(user("我在成都")), scripts)["content"] == '{"changes": "oops"}'


@pytest.mark.parametrize(
    "script, problem",
    [
        ({"memory_extraction": {"extract_memory": 1}}, "memory_extraction.extract_memory: must be true"),
        ({"memory_extraction": {"extract_memory": True, "content": "x"}}, "unknown key 'content'"),
        ({"memory_extraction": {"bogus": 1}}, "memory_extraction: unknown key 'bogus'"),
        ({"scenarios": [{"match": "q", "recall": "(", "steps": [{"content": "a"}]}]}, "scenarios[0].recall"),
    ],
)
def test_malformed_memory_keys_are_refused(script, problem):
    with pytest.raises(ScriptError) as refused:
        Script(script)
    assert problem in str(refused.value)


def test_shown_memories_are_read_most_relevant_first():
    text = memory_block("住在重庆", '喜欢"猫"') + '\n- fact: "not a memory"'
    assert shown_memories(text) == ["住在重庆", '喜欢"猫"']
    assert shown_memories(SYSTEM) == []


def test_the_memory_block_is_not_what_the_user_said():
    conversation = from_openai({"messages": [{"role": "system", "content": SYSTEM}, memory_message("住在成都")]})
    assert conversation.last_user_text == "" and shown_memories(conversation.memory) == ["住在成都"]


def ask_weather(*memories: str) -> dict:
    shown = [memory_message(*memories)] if memories else []
    messages = [{"role": "system", "content": SYSTEM}, *shown, *user("明天天气如何？")]
    return openai_message({"model": "demo", "messages": messages})


def called_city(message: dict) -> str:
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "mojitianqi-DayWeather"
    return json.loads(call["function"]["arguments"])["city"]


def test_the_weather_is_asked_for_the_remembered_city_without_asking_where():
    assert called_city(ask_weather("喜欢猫", "住在成都")) == "成都市"


def test_the_most_relevant_city_memory_counts():
    assert called_city(ask_weather("住在重庆", "住在成都")) == "重庆市"


@pytest.mark.parametrize("memories", [(), ("喜欢猫",)])
def test_without_a_remembered_city_the_model_asks_where(memories):
    message = ask_weather(*memories)
    assert not message.get("tool_calls")
    assert message["content"] == "请问您在哪个城市？告诉我城市，我就帮您查询明天的天气。"


def test_the_answer_says_the_city_came_from_what_the_user_said_before():
    messages = [{"role": "system", "content": SYSTEM}, memory_message("住在成都"), *user("明天天气如何？")]
    call = openai_message({"model": "demo", "messages": messages})
    weather = {"data": [{"condition": "多云", "temp_low": 10, "temp_high": 18, "humidity": 76}]}
    messages += [call, {"role": "tool", "content": json.dumps(weather, ensure_ascii=False)}]
    answer = openai_message({"model": "demo", "messages": messages})["content"]
    assert answer.startswith("您之前说过住在成都。明天（2026年03月01日）成都的天气为多云")


def test_the_memory_message_is_found_over_the_anthropic_wire():
    body = {
        "model": "demo",
        "max_tokens": 200,
        "system": SYSTEM,
        # The Anthropic provider merges the memory block and the user's message into one.
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": memory_block("住在成都")},
                    {"type": "text", "text": "明天天气如何？"},
                ],
            }
        ],
    }
    conversation = from_anthropic(body)
    assert conversation.last_user_text == "明天天气如何？" and conversation.system == SYSTEM
    step, groups = Script(SCRIPTS["demo"]).pick(conversation)
    assert groups["city"] == "成都" and step["tool_calls"][0]["arguments"]["city"] == "{city}市"


@pytest.mark.parametrize(
    "said, answer",
    [
        ("我在成都", "好的，您在成都。需要的话，我可以帮您查询成都明天的天气，或者规划出行路线。"),
        ("我搬到重庆了", "好的，您现在住在重庆。需要的话，我可以帮您查询重庆明天的天气，或者规划出行路线。"),
    ],
)
def test_the_demo_acknowledges_where_the_user_lives(said, answer):
    messages = [{"role": "system", "content": SYSTEM}, *user(said)]
    assert openai_message({"model": "demo", "messages": messages})["content"] == answer
