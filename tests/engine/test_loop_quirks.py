"""Real models misbehave on the tool side: repeated and malformed calls become tool errors and
loop hints the model can read, and the run ends normally, never as an internal error."""

import json
import uuid

import httpx
import pytest

from conversations.models import LLMCall, Message, ToolInvocation
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.runs import advance, last_answer, start_run
from tools.arguments import MAX_DEPTH

pytestmark = pytest.mark.django_db


def call(name, arguments):
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def script(*steps):
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def statuses(run):
    return list(
        ToolInvocation.objects.filter(run=run).order_by("created_at", "position").values_list("status", flat=True)
    )


def test_repeats_with_invalid_json_arguments_are_hinted_then_stopped(scripted_agent):
    agent = scripted_agent(
        script(call("test-echo", '{"text": oops')), tools=["test-echo"], max_iterations=20, max_same_tool_streak=3
    )
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("completed", "tool_loop")
    assert statuses(run) == ["error"] * 3 + ["blocked", "blocked"]
    hint = Message.objects.filter(run=run, role="tool").order_by("order")[3].content
    assert "called 4 times in a row" in hint
    assert LLMCall.objects.filter(run=run).count() == 5


def test_alternating_calls_are_a_loop(scripted_agent):
    echo, calc = call("test-echo", {"text": "a"}), call("calculator", {"expression": "1+1"})
    agent = scripted_agent(
        script({"branches": [{"if_last_tool_name": "test-echo", "then": calc}], "else": echo}),
        tools=["test-echo", "calculator"],
        max_iterations=20,
        max_same_tool_streak=3,
    )
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("completed", "tool_loop")
    assert statuses(run) == ["succeeded"] * 3 + ["blocked", "blocked"]
    hint = Message.objects.filter(run=run, role="tool").order_by("order")[3].content
    assert "calculator, test-echo" in hint or "test-echo, calculator" in hint
    assert "repeated over the last 4 steps" in hint
    assert "test-echo" in last_answer(run) and "calculator" in last_answer(run)


def test_a_model_that_changes_course_after_the_hint_goes_on(scripted_agent):
    agent = scripted_agent(
        script(
            {
                "branches": [{"if_last_tool_result_matches": "not run", "then": {"content": "ok"}}],
                "else": call("test-echo", '{"text": oops'),
            }
        ),
        tools=["test-echo"],
        max_same_tool_streak=2,
    )
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason, last_answer(run)) == ("completed", "final_answer", "ok")
    assert statuses(run) == ["error", "error", "blocked"]


def agent_replying(fake_llm, *steps, tools=("test-echo",)):
    """An agent whose model follows the script; the script is sent as ASCII JSON so it can hold
    the lone surrogates some models emit."""
    name = f"q-{uuid.uuid4().hex[:10]}"
    httpx.put(
        f"{fake_llm.base_url}/_scripts/{name}",
        content=json.dumps(script(*steps)),
        headers={"content-type": "application/json"},
        timeout=10,
    ).raise_for_status()
    return make_agent(tools=list(tools), model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=name))


BAD_CALLS = {
    "lone surrogate in the arguments": (call("test-echo", '{"text": "\\ud83d"}'), "broken Unicode escape"),
    "lone surrogate in the tool name": (call("test-echo\ud83d", {"text": "a"}), "no tool named 'test-echo\ufffd'"),
    "NUL in a key": (call("test-echo", '{"text": "a", "te\\u0000xt": 1}'), "Unsupported argument(s) te\ufffdxt"),
    "deep nesting": (call("test-echo", '{"text":' * 5000 + '"a"' + "}" * 5000), f"more than {MAX_DEPTH} levels"),
    "5000-character tool name": (call("x" * 5000, {}), "no tool named 'xxxx"),
    "arguments that are no object": (call("test-echo", "[1, 2]"), "must be a JSON object, not list"),
}


@pytest.mark.parametrize("bad_call,told", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_shapes_from_the_model_become_tool_errors(fake_llm, no_enqueue, bad_call, told):
    agent = agent_replying(fake_llm, bad_call, {"content": "sorry: {last_tool_result}"})
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    [invocation] = ToolInvocation.objects.filter(run=run)
    assert invocation.status == "error" and told in invocation.result
    assert len(invocation.tool_name) <= 64
    assert last_answer(run).startswith("sorry: ") and told in last_answer(run)


@pytest.mark.parametrize("name", [{"x": 1}, None, ["test-echo"]])
def test_a_tool_name_that_is_no_string_becomes_a_tool_error(scripted_agent, name):
    """The fake server only sends string names, so the call is stored as a provider would store
    what such a server sent, and the run is taken from there."""
    agent = scripted_agent(script({"content": "answered: {last_tool_result}"}), tools=["test-echo"])
    run = start_run(agent)
    llm_call = LLMCall.objects.create(
        run=run,
        iteration=1,
        attempt=1,
        model_config=agent.model_config,
        provider="openai_compatible",
        model_name=agent.model_config.model,
        request={},
        status="succeeded",
    )
    Message.objects.create(
        conversation=run.conversation,
        run=run,
        order=2,
        role="assistant",
        llm_call=llm_call,
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}],
    )
    run.conversation.__class__.objects.filter(pk=run.conversation_id).update(message_count=2)
    run = advance(run)

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    [invocation] = ToolInvocation.objects.filter(run=run)
    assert invocation.status == "error" and "The tool name must be a string" in invocation.result
    assert "The tool name must be a string" in last_answer(run)


@pytest.mark.parametrize(
    "call_id", ["x" * 500, "call-\ud83d", "call-\u0000"], ids=["500 characters", "surrogate", "NUL"]
)
def test_a_tool_call_id_that_cannot_be_stored_is_replaced(fake_llm, no_enqueue, call_id):
    """The id is the model's too: one that no column can hold gets our own id, which the stored
    assistant message and the tool result share, and the run goes on."""
    bad = {"tool_calls": [{"name": "test-echo", "arguments": {"text": "a"}, "id": call_id}]}
    agent = agent_replying(fake_llm, bad, {"content": "done: {last_tool_result}"})
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    [invocation] = ToolInvocation.objects.filter(run=run)
    assert invocation.status == "succeeded" and len(invocation.tool_call_id) <= 128
    assert "\x00" not in invocation.tool_call_id and "\ud83d" not in invocation.tool_call_id
    stored = Message.objects.get(run=run, role="assistant", tool_calls__isnull=False).tool_calls[0]["id"]
    result = Message.objects.get(run=run, role="tool")
    assert stored == invocation.tool_call_id == result.tool_call_id
