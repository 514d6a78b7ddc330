"""Folding earlier turns into the conversation's summary with a model call.

The call is an LLMCall with purpose `summary` (its own attempts, retries and fallback, its
tokens and cost in the run's totals). The summary is stored on the Conversation with the
order of the last message it covers, in the transaction that completes the call, so later
steps and runs send it instead of those messages and it is not made again.
"""

import json

from agents.providers.base import estimate_prompt_tokens, estimate_tokens
from agents.snapshot import AgentSnapshot
from conversations.batch import Batch, PendingCommit
from conversations.models import Conversation, LLMCall, Message, Run
from conversations.services import db_value
from engine.model_call import model_call
from engine.turns import Turn, trimmed
from engine.window import fitted, history_budget

INSTRUCTIONS = (
    "You keep the memory of a conversation between a user and an assistant that uses tools. "
    "Write a concise summary of the conversation below, merged with the earlier summary if one is given: "
    "the user's goals, facts and preferences they stated, what the assistant found out (tool results that "
    "still matter) and answered, and anything left open. Keep names, numbers and dates exact. Write in the "
    "language of the conversation. Answer with the summary only."
)
TRANSCRIPT_HEADING = "Conversation to summarise:"
# A tool result rarely needs more than this in a summary's source; it keeps the call small.
_RESULT_CHARS = 2000
CUT_NOTE = "[The start of the conversation is left out: it does not fit the model's context.]\n"


def _line(message: Message) -> str:
    if message.role == Message.Role.TOOL:
        return f"tool {message.name or message.tool_call_id} returned: {trimmed(message.content, _RESULT_CHARS)}"
    content = message.content
    line = f"{message.role}: {content}" if content else ""
    for call in message.tool_calls or []:
        function = call["function"]
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        line += f"\n{message.role} called tool {function['name']} with {arguments}"
    return line.strip()


def transcript(turns: list[Turn]) -> str:
    """The turns as text (their messages as the input guardrails left them: engine.guardrails.screened)."""
    return "\n".join(line for turn in turns for unit in turn for m in unit if (line := _line(m)))


def _fitting(text: str, room: int | None) -> str:
    """The transcript, or as much of its end as fits the room the model's window leaves: a
    summary of the later part beats a request the server refuses."""
    if room is None or estimate_tokens(text) <= room:
        return text
    while text and estimate_tokens(CUT_NOTE + text) > room:
        keep = int(len(text) * max(room, 0) / estimate_tokens(CUT_NOTE + text) * 0.9)
        text = text[len(text) - keep :] if keep > 0 else ""
    return CUT_NOTE + text


def summarise(
    *,
    run: Run,
    owner: str,
    snapshot: AgentSnapshot,
    iteration: int,
    previous: str,
    turns: list[Turn],
    through: int,
    pending: PendingCommit | None = None,
) -> str:
    earlier = f"Earlier summary:\n{previous}\n\n" if previous else ""
    budget = history_budget(snapshot)
    head = f"{earlier}{TRANSCRIPT_HEADING}\n"
    room = (
        None
        if budget is None
        else budget - estimate_prompt_tokens(messages=[{"content": INSTRUCTIONS}, {"content": head}])
    )
    messages = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": head + _fitting(transcript(turns), room)},
    ]

    def build(provider, model: dict) -> dict:
        # A summary is prose whatever the agent's answers must look like.
        plain = fitted({**model, "response_format": "text", "response_schema": None}, messages=messages, tools=[])
        return provider.build_request(
            model=plain, messages=messages, tools=[], tool_choice="auto", parallel_tool_calls=True
        )

    def record(call: LLMCall, response, batch: Batch, planned: bool) -> str:
        text = response.content.strip() or previous
        # Guarded, so a summary that covers less than the stored one never replaces it.
        batch.add(
            "summary",
            f'UPDATE "{Conversation._meta.db_table}" SET "context_summary" = %s, "context_summary_through" = %s, '
            '"context_summary_call_id" = %s WHERE "id" = %s AND "context_summary_through" < %s AND {guard}',
            [text, through, call.pk, db_value(Conversation, "id", run.conversation_id), through],
        )
        run.conversation.context_summary, run.conversation.context_summary_through = text, through
        return text

    return model_call(
        run=run,
        owner=owner,
        snapshot=snapshot,
        purpose=LLMCall.Purpose.SUMMARY,
        iteration=iteration,
        build=build,
        record=record,
        pending=pending,
    )
