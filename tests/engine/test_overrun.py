"""An answer the model did not finish (cut off at its output limit or its context) is never
delivered as a normal answer, and calls it asked for never run; a context the model's own answers
filled is said to be the model's doing, not the request's."""

import pytest

from api.completions import completion_outcome
from conversations.models import Message, ToolInvocation
from tests.support.llm import agent_on, calls_of
from tests.support.runs import ask, last_answer

pytestmark = pytest.mark.django_db

CUT = "The weather in Chengdu tomorrow is sunny with a high of 2"


def _script(step: dict) -> dict:
    return {"scenarios": [{"match": ".", "steps": [step, {"content": "done"}]}]}


@pytest.mark.parametrize(
    "provider,finish,stream",
    [
        ("openai_compatible", "length", False),
        ("openai_compatible", "length", True),
        ("anthropic", "max_tokens", False),
    ],
)
def test_a_cut_off_answer_ends_the_run_truncated_and_reads_so(fake_llm, provider, finish, stream):
    agent = agent_on(
        fake_llm,
        _script({"content": CUT, "finish_reason": finish, "usage": {"completion_tokens": 64}}),
        provider=provider,
        stream=stream,
        tools=[],
        model_fields={"max_tokens": 64},
    )
    run = ask(agent, "weather?")

    assert (run.status, run.stop_reason) == ("completed", "truncated")
    assert "produced too much" in run.error and "output limit (max tokens 64)" in run.error
    # The cut text is what there is to read; the API says it was cut, as OpenAI's `length` does.
    assert last_answer(run) == CUT
    outcome = completion_outcome(run_id=run.pk)
    assert (outcome.text, outcome.finish_reason) == (CUT, "length")
    assert [call.finish_reason for call in calls_of(run)] == ["length"]


@pytest.mark.parametrize("provider,finish", [("openai_compatible", "length"), ("anthropic", "max_tokens")])
def test_calls_of_a_cut_off_answer_never_run(fake_llm, provider, finish):
    # The first call's arguments are whole, the second's cut: neither may run, since the answer
    # the model meant was not finished.
    step = {
        "content": "",
        "tool_calls": [
            {"name": "test-echo", "arguments": {"text": "whole"}},
            {"name": "test-echo", "arguments": '{"text": "cu'},
        ],
        "finish_reason": finish,
    }
    agent = agent_on(fake_llm, _script(step), provider=provider)
    run = ask(agent, "echo twice")

    assert (run.status, run.stop_reason) == ("completed", "truncated")
    assert not ToolInvocation.objects.filter(run=run).exists()
    assert len(calls_of(run)) == 1
    answers = list(Message.objects.filter(run=run, role="assistant").order_by("order"))
    assert not any(message.tool_calls for message in answers)
    assert "my answer was cut off before it was complete" in answers[-1].content


def test_a_context_filled_by_the_model_s_own_answers_says_the_model_produced_too_much(fake_llm):
    # A model that runs away: each step a long call, until its own answers no longer fit.
    long_text = "lorem ipsum dolor sit amet " * 40
    script = {
        "defaults": {"context_window": 1200, "token_counting": "cl100k_base"},
        "scenarios": [
            {"match": ".", "steps": [{"tool_calls": [{"name": "test-echo", "arguments": {"text": long_text}}]}]}
        ],
    }
    agent = agent_on(fake_llm, script, max_same_tool_streak=50, max_iterations=50, context_tool_result_max_chars=10)
    run = ask(agent, "go")

    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert run.error.startswith("The model produced too much: its own ")
    assert "no longer fit the model's context" in run.error and "maximum context length is 1200" in run.error


def test_an_overflow_of_the_user_s_own_text_still_blames_the_request(fake_llm):
    script = {"defaults": {"context_window": 300, "token_counting": "cl100k_base"}, "fallback": {"content": "x"}}
    agent = agent_on(fake_llm, script, tools=[])
    run = ask(agent, "tell me about the lighthouse and the harbour " * 40)

    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert run.error.startswith("The request does not fit the model's context")
