"""POST /v1/chat/completions with response_format, with the official openai client against a
live server and worker: a json_schema answer checked on the platform's side (valid at once, or
repaired on the second try), json_object, an answer that never matches reported as an error
with code schema_invalid, and a bad schema refused with a 400 before any run starts."""

import json

import openai
import pytest

from conversations.models import LLMCall, Message, Run
from engine.answer_schema import REPAIR_NAME
from tests.support.factories import ModelConfigFactory, make_agent, make_user, token_for

pytestmark = pytest.mark.e2e

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
SCRIPT = {
    "scenarios": [
        {"match": "Platform check", "steps": [{"content": '{"city": "Chengdu", "temperature": 18}'}]},
        {"match": "valid", "steps": [{"content": '```json\n{"city": "Beijing", "temperature": 21}\n```'}]},
        {"match": "repair", "steps": [{"content": "Chengdu is 18 degrees today."}]},
        {"match": "object", "steps": [{"content": '{"anything": [1, 2]}'}]},
    ],
}


@pytest.fixture
def client(api_server, worker, fake_llm):
    fake_llm.script("oa-schema", SCRIPT)
    fake_llm.script("oa-schema-never", {"fallback": {"content": "never JSON"}})
    # A model config that streams: the wrong answer's deltas must not reach the client.
    make_agent(
        slug="oa-schema-stream",
        language="en",
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="oa-schema", stream=True),
    )
    make_agent(
        slug="oa-schema-never",
        language="en",
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="oa-schema-never"),
    )
    make_agent(
        slug="oa-schema", language="en", model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="oa-schema")
    )
    return openai.OpenAI(api_key=token_for(make_user()), base_url=f"{api_server.base_url}/v1", max_retries=0)


def _ask(client, text, response_format=FORMAT, model="oa-schema"):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], response_format=response_format
    )


def test_a_valid_answer_is_the_json_text_and_the_runs_output(client):
    completion = _ask(client, "valid please")

    assert json.loads(completion.choices[0].message.content) == {"city": "Beijing", "temperature": 21}
    run = Run.objects.get(pk=completion.model_extra["agentry"]["run_id"])
    assert (run.stop_reason, run.output_schema, run.output_parsed) == (
        "final_answer",
        SCHEMA,
        {"city": "Beijing", "temperature": 21},
    )


def test_a_wrong_answer_is_repaired_before_the_reply(client, fake_llm):
    completion = _ask(client, "repair please")

    assert json.loads(completion.choices[0].message.content) == {"city": "Chengdu", "temperature": 18}
    run = Run.objects.get(pk=completion.model_extra["agentry"]["run_id"])
    assert run.output_parsed == {"city": "Chengdu", "temperature": 18}
    assert LLMCall.objects.filter(run=run, purpose="step").count() == 2
    assert Message.objects.filter(run=run, role="user", name=REPAIR_NAME).count() == 1


def test_json_object_takes_any_object(client):
    completion = _ask(client, "object please", response_format={"type": "json_object"})
    assert json.loads(completion.choices[0].message.content) == {"anything": [1, 2]}


def test_an_answer_that_never_matches_is_an_error_saying_so(client):
    with pytest.raises(openai.APIStatusError) as raised:
        _ask(client, "anything", model="oa-schema-never")

    assert raised.value.status_code == 502
    error = raised.value.body
    assert error["code"] == "schema_invalid" and "without an answer matching the requested schema" in error["message"]
    run = Run.objects.get(pk=raised.value.response.headers["X-Agentry-Run-Id"])
    # The field's default: two repair turns, three answers.
    assert (run.status, run.stop_reason) == ("completed", "schema_invalid")
    assert LLMCall.objects.filter(run=run, purpose="step").count() == 3


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}, "schema"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema"),
        ({"type": "xml"}, "response_format"),
    ],
)
def test_a_bad_response_format_is_a_400_and_starts_no_run(client, response_format, param):
    with pytest.raises(openai.BadRequestError) as raised:
        _ask(client, "valid please", response_format=response_format)
    assert raised.value.body["param"].endswith(param)
    assert not Run.objects.exists()


def test_a_streamed_reply_carries_only_the_answer_that_matched(client):
    chunks = list(
        client.chat.completions.create(
            model="oa-schema-stream",
            messages=[{"role": "user", "content": "repair please"}],
            response_format=FORMAT,
            stream=True,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(text) == {"city": "Chengdu", "temperature": 18}
    run = Run.objects.get(pk=chunks[-1].model_extra["agentry"]["run_id"])
    assert LLMCall.objects.filter(run=run, purpose="step").count() == 2


def test_a_streamed_request_that_never_matches_ends_with_the_error(client):
    with pytest.raises(openai.APIError) as raised:
        list(
            client.chat.completions.create(
                model="oa-schema-never",
                messages=[{"role": "user", "content": "anything"}],
                response_format=FORMAT,
                stream=True,
            )
        )
    assert "without an answer matching the requested schema" in raised.value.message
