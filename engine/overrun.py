"""When the model produces too much: an answer cut off by its output limit or by its context, and
a request its own earlier output made too long for the context. Each is said as what happened,
for the run's error, so an operator does not look for a fault in the request or the platform.

Pure over the model's answer, its snapshot and the run's messages: tested without I/O.
"""

from agents.providers import LLMResponse
from agents.providers.base import estimate_message_tokens
from agents.snapshot import ModelSnapshot
from conversations.models import Message

# The finish reason (normalised by the provider adapters: OpenAI's `length`, Anthropic's
# `max_tokens` and `model_context_window_exceeded`) of an answer the model did not finish.
TRUNCATED_FINISH = "length"
# An answer whose request and output reach this share of the model's context window was cut off
# by the window, not by max tokens (token counts are a server's or an estimate: not exact).
CONTEXT_FULL = 0.95


def answer_truncated(response: LLMResponse) -> bool:
    return response.finish_reason == TRUNCATED_FINISH


def truncation_error(*, response: LLMResponse, model: ModelSnapshot) -> str:
    """Why the answer stopped before its end, as the run's error says it."""
    usage = response.usage
    window = model.get("context_window")
    if window and usage.prompt_tokens + usage.completion_tokens >= window * CONTEXT_FULL:
        return (
            f"The model produced too much: its answer filled the model's context window ({window} tokens: "
            f"{usage.prompt_tokens} of request, {usage.completion_tokens} of answer) and was cut off there."
        )
    limit = f"max tokens {model['max_tokens']}" if model.get("max_tokens") else "the server's own limit"
    return (
        f"The model produced too much: its answer was cut off at its output limit ({limit}) after "
        f"{usage.completion_tokens} tokens."
    )


def overflow_error(*, server_said: str, messages: list[Message], run_id) -> str:
    """The error of a run whose request no longer fits the model's context: when the model's own
    answers in this run are most of what it holds, the model produced too much, not the user."""
    sizes = [
        (message.run_id == run_id and message.role == Message.Role.ASSISTANT, _tokens(message)) for message in messages
    ]
    own = sum(tokens for mine, tokens in sizes if mine)
    total = sum(tokens for _, tokens in sizes)
    if total and own * 2 >= total:
        answers = sum(1 for mine, _ in sizes if mine)
        return (
            f"The model produced too much: its own {answers} answers in this run (about {own} of the "
            f"conversation's {total} tokens) no longer fit the model's context. The server said: {server_said}"
        )
    return f"The request does not fit the model's context: {server_said}"


def _tokens(message: Message) -> int:
    return estimate_message_tokens({"content": message.content, "tool_calls": message.tool_calls})
