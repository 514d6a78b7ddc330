"""Real models misbehave (small llama.cpp models especially): empty answers, servers that cannot
stream tool calls, requests over the context window, and errors that must say what happened.
Each is a scripted behaviour of the fake model server, driven through the real provider code."""

import pytest
from django.db import IntegrityError, transaction

from agents.admin import ModelConfigForm
from agents.models import ModelConfig
from agents.providers import ProviderError, get_provider
from api.completions import completion_outcome
from conversations.models import Conversation, Message
from conversations.services import conversation_create, messages_append
from tests.support.llm import agent_on, assert_totals_match_calls, calls_of
from tests.support.runs import advance, ask, start_run

pytestmark = pytest.mark.django_db

ECHO = {
    "scenarios": [
        {
            "match": r"echo (?P<word>\w+)",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "{word}"}}]},
                {"content": "You said {last_tool_result}."},
            ],
        }
    ]
}


def test_an_empty_answer_is_retried_then_the_run_says_it_got_none(fake_llm):
    agent = agent_on(fake_llm, {"fallback": {"content": "", "finish_reason": "stop"}}, tools=[])
    run = ask(agent, "hello?")

    calls = calls_of(run)
    assert [(c.attempt, c.status, c.finish_reason) for c in calls] == [(n, "failed", "stop") for n in (1, 2, 3)]
    assert all("no text and no tool calls" in c.error and c.total_tokens > 0 for c in calls)
    assert run.stop_reason == "empty_answer" and run.iterations == 0
    answer = Message.objects.filter(run=run, role="assistant").get()
    assert "no text and no tool calls" in answer.content and answer.llm_call_id is None
    assert_totals_match_calls(run)
    # What /v1/chat/completions answers: the explanation, not an empty string.
    assert "no text and no tool calls" in completion_outcome(run_id=run.pk).text


def test_an_empty_answer_goes_to_the_fallback_model(fake_llm):
    fallback = agent_on(fake_llm, {"fallback": {"content": "Here is an answer."}}, tools=[]).model_config
    agent = agent_on(
        fake_llm,
        {"fallback": {"content": "   "}},
        tools=[],
        fallback_model_config=fallback,
        model_fields={"max_retries": 0},
    )
    run = ask(agent, "hello?")

    assert [(c.model_config_id, c.status) for c in calls_of(run)] == [
        (agent.model_config_id, "failed"),
        (fallback.pk, "succeeded"),
    ]
    assert (run.stop_reason, Message.objects.filter(run=run, role="assistant").get().content) == (
        "final_answer",
        "Here is an answer.",
    )


@pytest.mark.parametrize(
    "status,message",
    [
        (500, "Cannot use tools with stream"),
        (400, "Automatic streaming tool choice is not supported"),
    ],
)
def test_a_server_that_cannot_stream_tool_calls_is_asked_unstreamed_at_once(fake_llm, status, message):
    script = {**ECHO, "defaults": {"stream_tools_error": {"status": status, "message": message}}}
    agent = agent_on(fake_llm, script, stream=True)
    run = ask(agent, "echo hello")

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    assert Message.objects.filter(run=run, role="assistant").last().content == "You said hello."
    # One refused attempt, no retries burnt on it; the next step goes unstreamed from the start.
    assert [(c.iteration, c.attempt, c.status, c.http_status) for c in calls_of(run)] == [
        (1, 1, "failed", status),
        (1, 2, "succeeded", 200),
        (2, 1, "succeeded", 200),
    ]
    assert message in calls_of(run)[0].error
    assert [bool(c.request.get("stream")) for c in calls_of(run)] == [True, False, False]
    config = ModelConfig.objects.get(pk=agent.model_config_id)
    assert config.stream_tools_unsupported and config.stream

    second = ask(agent, "echo again")
    assert [c.status for c in calls_of(second)] == ["succeeded", "succeeded"]


@pytest.mark.parametrize("provider", ["openai_compatible", "anthropic"])
def test_a_refusal_inside_the_stream_also_switches_to_unstreamed(fake_llm, provider):
    refusal = {"status": 500, "message": "Cannot use tools with stream", "in_stream": True}
    agent = agent_on(fake_llm, {**ECHO, "defaults": {"stream_tools_error": refusal}}, stream=True, provider=provider)
    run = ask(agent, "echo inside")

    assert [(c.attempt, c.status) for c in calls_of(run)] == [(1, "failed"), (2, "succeeded"), (1, "succeeded")]
    assert "Cannot use tools with stream" in calls_of(run)[0].error
    assert ModelConfig.objects.get(pk=agent.model_config_id).stream_tools_unsupported


@pytest.mark.parametrize("provider", ["openai_compatible", "anthropic"])
def test_an_empty_200_stream_to_a_request_with_tools_switches_to_unstreamed(fake_llm, provider):
    # llama.cpp: HTTP 200, not one event, "Automatic streaming tool choice is not supported" in its log.
    refusal = {"empty": True, "message": "Automatic streaming tool choice is not supported"}
    agent = agent_on(fake_llm, {**ECHO, "defaults": {"stream_tools_error": refusal}}, stream=True, provider=provider)
    run = ask(agent, "echo quietly")

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    assert Message.objects.filter(run=run, role="assistant").last().content == "You said quietly."
    # One attempt refused, not three retries of a "cut" stream; the next step goes unstreamed at once.
    calls = calls_of(run)
    assert [(c.iteration, c.attempt, c.status, c.http_status) for c in calls] == [
        (1, 1, "failed", 200),
        (1, 2, "succeeded", 200),
        (2, 1, "succeeded", 200),
    ]
    assert [bool(c.request.get("stream")) for c in calls] == [True, False, False]
    # The error names the cause and what was done about it.
    assert "does not stream answers to requests with tools" in calls[0].error
    assert "Automatic streaming tool choice is not supported" in calls[0].error
    assert ModelConfig.objects.get(pk=agent.model_config_id).stream_tools_unsupported


def test_streaming_without_tools_still_streams_on_such_a_server(fake_llm):
    script = {
        "defaults": {"stream_tools_error": {"status": 500, "message": "Cannot use tools with stream"}},
        "fallback": {"content": "plain talk"},
    }
    agent = agent_on(fake_llm, script, stream=True, tools=[])
    run = ask(agent, "hi")

    assert [(c.status, c.request.get("stream")) for c in calls_of(run)] == [("succeeded", True)]
    assert not ModelConfig.objects.get(pk=agent.model_config_id).stream_tools_unsupported


LONG = (
    "Tell me more about the history of the river port, the warehouses along the quay, the ferry lines "
    "that crossed to the island and the families who ran the boatyards before the bridge was built. "
)
SUMMARISING = {"match": "Conversation to summarise", "steps": [{"content": "The user asked about the port."}]}


def _conversation_with_history(agent, turns: int) -> Conversation:
    conversation = conversation_create(agent=agent)
    history = []
    for n in range(turns):
        history += [{"role": "user", "content": f"{n}: {LONG * 3}"}, {"role": "assistant", "content": f"Answer {n}."}]
    messages_append(conversation_id=conversation.pk, run_id=None, messages=history)
    return conversation


@pytest.mark.parametrize(
    "style,said",
    [
        ("openai", "maximum context length is 1500 tokens"),
        ("llamacpp", "the request exceeds the available context size"),
    ],
)
def test_a_context_overflow_folds_the_history_and_retries_once(fake_llm, style, said):
    script = {
        "defaults": {"context_window": 1500, "context_error": style, "token_counting": "cl100k_base"},
        "scenarios": [SUMMARISING],
        "fallback": {"content": "Done."},
    }
    agent = agent_on(fake_llm, script, tools=[])  # the config does not know the window
    conversation = _conversation_with_history(agent, turns=14)
    run = advance(start_run(agent, "And the lighthouse?", conversation))

    rows = [(c.purpose, c.attempt, c.status, c.http_status) for c in calls_of(run)]
    assert rows == [("step", 1, "failed", 400), ("summary", 1, "succeeded", 200), ("step", 2, "succeeded", 200)]
    assert said in calls_of(run)[0].error
    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    conversation.refresh_from_db()
    assert conversation.context_summary == "The user asked about the port."
    retried = calls_of(run)[2].request["messages"]
    assert len(retried) < len(calls_of(run)[0].request["messages"])


def test_an_overflow_with_nothing_left_to_fold_fails_the_run_and_says_why(fake_llm):
    script = {"defaults": {"context_window": 300, "token_counting": "cl100k_base"}, "fallback": {"content": "x"}}
    agent = agent_on(fake_llm, script, tools=[])
    run = ask(agent, LONG * 10)

    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert [c.status for c in calls_of(run)] == ["failed"]
    assert "does not fit the model's context" in run.error and "maximum context length is 300" in run.error


def test_a_known_context_window_keeps_every_request_within_it(fake_llm):
    # The fake counts with a real tokeniser and refuses prompt + max_tokens over its window.
    script = {
        "defaults": {"context_window": 1500, "token_counting": "cl100k_base"},
        "scenarios": [SUMMARISING],
        "fallback": {"content": "Done."},
    }
    agent = agent_on(fake_llm, script, tools=["test-echo"], model_fields={"context_window": 1500, "max_tokens": 600})
    conversation = _conversation_with_history(agent, turns=14)
    run = advance(start_run(agent, "And the lighthouse?", conversation))

    calls = calls_of(run)
    assert all(c.status == "succeeded" for c in calls), [c.error for c in calls]
    assert [c.purpose for c in calls] == ["summary", "step"]
    # The folded turns alone would overflow the summary request: its oldest part is left out.
    assert "is left out" in calls[0].request["messages"][1]["content"]
    assert all(1 <= c.request["max_tokens"] <= 600 for c in calls)
    assert run.stop_reason == "final_answer"


def _send(fake_llm, name: str, *, stream=False, base=None, **model):
    provider = get_provider("openai_compatible")
    config = {
        "base_url": base or fake_llm.api_base,
        "model": name,
        "stream": stream,
        "read_timeout_seconds": 10,
        "connect_timeout_seconds": 5,
        **model,
    }
    body = provider.build_request(
        model=config,
        messages=[{"role": "user", "content": "go"}],
        tools=[],
        tool_choice="auto",
        parallel_tool_calls=True,
    )
    with pytest.raises(ProviderError) as caught:
        provider.send(model=config, api_key="", body=body)
    return caught.value


def test_each_error_says_what_happened(fake_llm):
    url = f"{fake_llm.api_base}/chat/completions"
    fake_llm.script("err-500", {"fallback": {"content": "x", "fault": {"status": 500}}})
    error = _send(fake_llm, "err-500")
    assert str(error) == (
        f"HTTP 500 from {url} (model 'err-500'): The server had an error while processing your request."
    )
    assert error.retryable and not error.context_overflow

    error = _send(fake_llm, "no-such-model")
    assert f"HTTP 404 from {url} (model 'no-such-model'): The model `no-such-model` does not exist" in str(error)

    fake_llm.script("err-ctx", {"defaults": {"context_window": 5}, "fallback": {"content": "x"}})
    error = _send(fake_llm, "err-ctx")
    assert "HTTP 400" in str(error) and "maximum context length is 5 tokens" in str(error)
    assert error.context_overflow and not error.retryable

    fake_llm.script("err-cut", {"fallback": {"content": "a long answer " * 20, "fault": {"kind": "cut_stream"}}})
    error = _send(fake_llm, "err-cut", stream=True)
    received = int(str(error).split("was cut after ")[1].split(" bytes")[0])
    assert received > 0 and "before the answer was complete" in str(error) and "err-cut" in str(error)

    fake_llm.script("err-slow", {"fallback": {"content": "x", "fault": {"kind": "timeout", "timeout_ms": 2000}}})
    error = _send(fake_llm, "err-slow", read_timeout_seconds=0.3)
    assert str(error) == f"The request to {url} (model 'err-slow') timed out after 0.3 s without an answer."

    error = _send(fake_llm, "x", base="http://127.0.0.1:9/v1")
    assert str(error) == "Could not connect to http://127.0.0.1:9/v1/chat/completions (model 'x'): connection refused."


def _model_form(**fields) -> ModelConfigForm:
    data = {
        "name": "local",
        "provider": "openai_compatible",
        "base_url": "http://10.0.0.5:8080/v1",
        "model": "gemma",
        "stop": "[]",
        "response_format": "text",
        "extra_params": "{}",
        "response_schema": "null",
        "connect_timeout_seconds": 10,
        "read_timeout_seconds": 120,
        "max_retries": 2,
        "price_input_per_million": 0,
        "price_output_per_million": 0,
        "price_cached_input_per_million": 0,
        **fields,
    }
    return ModelConfigForm(data=data)


def test_a_base_url_without_a_scheme_is_refused():
    form = _model_form(base_url="10.0.0.5:8080/v1")
    assert not form.is_valid() and "Include the scheme" in form.errors["base_url"][0]
    assert not _model_form(base_url="api.example.com/v1").is_valid()
    form = _model_form()
    assert form.is_valid(), form.errors
    assert form.save().base_url == "http://10.0.0.5:8080/v1"


def test_max_tokens_must_be_at_least_one_and_below_the_window():
    form = _model_form(max_tokens=0)
    assert not form.is_valid() and "max_tokens" in form.errors
    form = _model_form(max_tokens=4096, context_window=4096)
    assert not form.is_valid() and "below the context window" in form.errors["max_tokens"][0]
    form = _model_form(max_tokens=1, context_window=4096)
    assert form.is_valid(), form.errors
    config = form.save()
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelConfig.objects.filter(pk=config.pk).update(max_tokens=0)


def test_the_admin_shows_what_was_learned_about_a_model(admin_client, fake_llm):
    agent = agent_on(fake_llm, ECHO)
    ModelConfig.objects.filter(pk=agent.model_config_id).update(stream_tools_unsupported=True, context_window=4096)
    page = admin_client.get(f"/admin/agents/modelconfig/{agent.model_config_id}/change/").content.decode()
    assert 'id="id_stream_tools_unsupported" checked' in page
    assert 'name="context_window" value="4096"' in page
