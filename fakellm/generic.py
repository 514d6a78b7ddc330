"""The generic mode: a model that calls whichever tools it is offered and then answers from what
they returned, so an operator can try a new tool end to end without a real model.

A step `{"generic": {…}}` (the shipped `generic` script is nothing else) stands, per request, for:

- while offered tools are left that were not called since the user's message: a call of each of
  them (all in one step, or one per step when the request turns parallel calls off), or of one
  tool chosen by the seed (`"call": "one"`), with arguments drawn from the tool's JSON Schema;
- then a text answer listing each call, the arguments it ran with and what it returned.

The request's tool choice is honoured: `none` answers at once, a named tool is the only one
called. Arguments are seeded by the user's message, the tool's name and `seed`, so a question
gets the same arguments every time it is asked.
"""

from __future__ import annotations

import json
import random

from fakellm.conversation import Conversation, OfferedTool
from fakellm.schema_values import tool_arguments

OPTIONS = {"call": "each", "optional": "some", "seed": 0}
RESULT_CHARS = 300


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _rng(options: dict, conversation: Conversation, salt: str) -> random.Random:
    # A string seed is hashed with SHA-512, so the draw does not depend on the process's hash seed.
    return random.Random(f"{options['seed']}\x00{conversation.last_user_text}\x00{salt}")


def _to_call(options: dict, conversation: Conversation) -> list[OfferedTool]:
    choice = conversation.tool_choice
    if choice.mode == "none":
        return []
    tools = conversation.tools
    if choice.mode == "tool":
        tools = [tool for tool in tools if tool.name == choice.name]
    if options["call"] == "one":
        if conversation.calls_made or not tools:
            return []
        return [_rng(options, conversation, "").choice(tools)]
    made = set(conversation.calls_made)
    left = [tool for tool in tools if tool.name not in made]
    return left if choice.parallel else left[:1]


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= RESULT_CHARS else text[: RESULT_CHARS - 1] + "…"


def _answer(conversation: Conversation) -> str:
    results = conversation.tool_results
    if not results:
        if not conversation.tools:
            return f"No tools were offered, so I called none. Your message: {_one_line(conversation.last_user_text)}"
        return f"Tool use is off for this request, so I called none of the {len(conversation.tools)} tools offered."
    lines = [f"I called {len(results)} tool{'s' if len(results) > 1 else ''}."]
    for result in results:
        lines.append(f"- {result.name} with {_dumps(result.arguments)} returned: {_one_line(result.text)}")
    return "\n".join(lines)


def generic_step(step: dict, conversation: Conversation) -> dict:
    """The reply step (tool calls, or the answer) that a generic step stands for here."""
    options = {**OPTIONS, **step["generic"]}
    reply = {key: value for key, value in step.items() if key != "generic"}
    tools = _to_call(options, conversation)
    if not tools:
        reply["content"] = _answer(conversation) + conversation.last_user_parts_text
        return reply
    # Raw JSON strings: sent as they are, so a drawn value is never read as a template.
    reply["tool_calls"] = [
        {
            "name": tool.name,
            "arguments": _dumps(
                tool_arguments(tool.schema, _rng(options, conversation, tool.name), optional=options["optional"])
            ),
        }
        for tool in tools
    ]
    return reply
