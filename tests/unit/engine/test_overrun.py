"""What a cut-off answer and a context the model filled are said to be (engine.overrun), and the
decision made with a cut-off answer (engine.next_step, `truncated`): pure, no database."""

import uuid

from agents.providers import LLMResponse, Usage
from conversations.models import Message, StopReason
from engine.next_step import Finish, next_step
from engine.overrun import answer_truncated, overflow_error, truncation_error
from tests.unit.engine.test_next_step_answer import NOW, RUN_ID, RunRow, calls, snapshot

MODEL = {"max_tokens": 256, "context_window": 4096}


def _response(finish: str, *, prompt: int = 100, completion: int = 256, calls=()) -> LLMResponse:
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
    return LLMResponse("cut", list(calls), finish, usage, {})


def test_only_an_answer_cut_at_a_limit_is_truncated():
    assert answer_truncated(_response("length"))
    assert not any(answer_truncated(_response(finish)) for finish in ("stop", "tool_calls", "content_filter"))


def test_the_error_names_the_limit_that_cut_the_answer():
    said = truncation_error(response=_response("length"), model=MODEL)
    assert said.startswith("The model produced too much") and "output limit (max tokens 256) after 256" in said
    # Request and answer reached the window: the context cut it, whatever max tokens allowed.
    full = truncation_error(response=_response("length", prompt=3900, completion=190), model=MODEL)
    assert "filled the model's context window (4096 tokens: 3900 of request, 190 of answer)" in full
    unknown = truncation_error(response=_response("length"), model={"max_tokens": None, "context_window": None})
    assert "output limit (the server's own limit)" in unknown


def _message(role: str, content: str, run_id=RUN_ID) -> Message:
    return Message(run_id=run_id, role=role, content=content)


def test_an_overflow_is_the_model_s_doing_when_its_own_answers_are_most_of_the_context():
    earlier = uuid.uuid4()
    messages = [
        _message("user", "short question " * 50, run_id=earlier),
        _message("user", "go"),
        *[_message("assistant", "lorem ipsum dolor sit amet " * 40) for _ in range(3)],
    ]
    said = overflow_error(server_said="maximum context length is 1200", messages=messages, run_id=RUN_ID)
    assert said.startswith("The model produced too much: its own 3 answers in this run")
    assert said.endswith("The server said: maximum context length is 1200")
    # Another run's answers are not this run's output: the request is too long.
    theirs = overflow_error(server_said="too long", messages=messages, run_id=earlier)
    assert theirs == "The request does not fit the model's context: too long"


def _answer(content: str, tool_calls=None) -> Message:
    return Message(run_id=RUN_ID, role=Message.Role.ASSISTANT, content=content, tool_calls=tool_calls)


def _decide(answer: Message, truncated: str) -> object:
    user = Message(run_id=RUN_ID, role=Message.Role.USER, content="hi")
    return next_step(RunRow(), [user, answer], snapshot(), now=NOW, answered=True, truncated=truncated)


def test_a_cut_off_answer_ends_the_run_and_its_calls_never_run():
    cut_text = _decide(_answer("It is sunny with a high of 2"), "cut")
    assert cut_text == Finish(StopReason.TRUNCATED, None, "cut")
    cut_calls = _decide(_answer("", calls()), "cut")
    assert isinstance(cut_calls, Finish) and cut_calls.reason == StopReason.TRUNCATED
    assert "cut off before it was complete" in cut_calls.message and cut_calls.status == "completed"
    # Not cut off: the same answer's calls run, its text is the answer.
    assert not isinstance(_decide(_answer("", calls()), ""), Finish)
    assert _decide(_answer("It is sunny."), "") == Finish(StopReason.FINAL_ANSWER)
