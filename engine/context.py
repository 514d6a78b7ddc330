"""The messages a model call sends, by the agent's context policy (seeds 001 §6.3, 003 §3.4,
004 §2.4): the system prompt first (with the summary of folded turns, if any), the tools (in
the request's own field), then the last N turns; tool results sent again in later steps are
cut to a budget; when the context would still exceed the agent's token budget or what the
model's context window leaves after the answer's room (window.py), the oldest turns are
folded into the conversation's summary by a model call (summarise).

Turns are kept or dropped whole, and an assistant message with tool calls always travels with
its results. Earlier runs that ended half-way (cancelled while a tool call waited for
approval, say) can leave an assistant tool-call message without all its results; providers
reject such a history, so those fragments are left out rather than blocking the conversation.

Turns. History cut into the pieces the context policy may keep, trim or fold, but never split.

A *unit* is one message, or an assistant message with tool calls together with the results
answering them (placed right after it, as providers require). A *turn* is a user message and
the units that follow it up to the next user message.

Summaries. Folding earlier turns into the conversation's summary with a model call.

The call is an LLMCall with purpose `summary` (its own attempts, retries and fallback, its
tokens and cost in the run's totals). The summary is stored on the Conversation with the
order of the last message it covers, in the transaction that completes the call, so later
steps and runs send it instead of those messages and it is not made again.
"""

import json

from agents.prompting import render_system_prompt
from agents.providers.base import estimate_message_tokens, estimate_prompt_tokens, estimate_tokens
from agents.providers.caching import MEMORY_CHARS
from agents.snapshot import AgentSnapshot
from attachments.parts import wire_content
from conversations.batch import Update
from conversations.models import Conversation, LLMCall, Message, Run
from conversations.selectors import conversation_messages_all, run_step_read
from engine.model_call import ModelRequest, answer_record, answer_writes, model_call
from engine.window import history_budget, tool_definitions

# One message, or an assistant message with its tool results; a user message and the units after it.
Unit = list[Message]
Turn = list[Unit]

SUMMARY_HEADING = "Summary of the earlier conversation (its messages are no longer shown):\n"


def converted_part(part: dict, conversion: dict) -> dict:
    """A part the model does not take, as the text a pre-step turned it into (engine.part_conversion)."""
    return {"type": "text", "text": f"[{part['type']} {part['name']}, {conversion['method']}]\n{conversion['text']}"}


def message_to_wire(message: Message, *, trim_to: int | None = None, converted: dict[str, dict] | None = None) -> dict:
    """A message in the internal format. One with parts has a list content (attachments.parts):
    its text (as the input guardrails left it: engine.guardrails.screened), then its parts, those
    in `converted` (attachment id -> {"method", "text"}) as their text."""
    content = message.content
    if message.parts:
        converted = converted or {}
        parts = [
            converted_part(part, converted[part["attachment"]]) if part["attachment"] in converted else part
            for part in message.parts
        ]
        content = wire_content(content, parts)
    wire = {"role": message.role, "content": content}
    if message.role == Message.Role.ASSISTANT and message.tool_calls:
        wire["tool_calls"] = message.tool_calls
    if message.reasoning:
        wire["reasoning"] = message.reasoning
    if message.role == Message.Role.TOOL:
        wire["content"] = trimmed(message.content, trim_to)
        wire["tool_call_id"] = message.tool_call_id
        if message.name:
            wire["name"] = message.name
    return wire


def _drop_unanswered_tool_calls(messages: list[Message], current_run_id) -> list[Message]:
    answered = {m.tool_call_id for m in messages if m.role == Message.Role.TOOL}
    dropped_ids: set[str] = set()
    kept = []
    for message in messages:
        if message.role == Message.Role.ASSISTANT and message.tool_calls and message.run_id != current_run_id:
            ids = {call["id"] for call in message.tool_calls}
            if not ids <= answered:
                dropped_ids |= ids
                continue
        if message.role == Message.Role.TOOL and message.tool_call_id in dropped_ids:
            continue
        kept.append(message)
    return kept


def _summary_through(run: Run, first_order: int) -> int:
    """The conversation's summary applies to this run only if it covers nothing of the run itself."""
    through = run.conversation.context_summary_through
    return through if through < first_order else 0


def _opening_order(rows: list[Message], run: Run) -> int | None:
    """Where the run starts: the order of its user message."""
    return next((m.order for m in rows if m.run_id == run.pk and m.role == Message.Role.USER), None)


def step_read(*, run_id) -> tuple[Run, list[Message]]:
    """The run, and the messages its model would see: everything before this run's first
    message not folded into the summary, plus the run's own messages. The summary applies only
    if it covers nothing of the run itself; in the common case the rows after it show that, and
    one query per step, which reads the run too, is enough."""
    run, rows = run_step_read(run_id=run_id)
    through = run.conversation.context_summary_through
    first = _opening_order(rows, run)
    if first is None and through:
        rows = conversation_messages_all(conversation_id=run.conversation_id)
        first = _opening_order(rows, run)
    history = [m for m in rows if first is not None and (m.order < first or m.run_id == run.pk)]
    return run, _drop_unanswered_tool_calls(history, run.pk)


def _wire_turns(turns: list[Turn], trim_to: int | None, converted: dict[str, dict] | None) -> list[list[dict]]:
    """Tool results are trimmed except those answering the newest assistant message: the step
    right after a tool call sees the whole result (bounded by the tool's own limit)."""
    newest = turns[-1][-1] if turns else None
    return [
        [
            message_to_wire(m, trim_to=None if unit is newest else trim_to, converted=converted)
            for unit in turn
            for m in unit
        ]
        for turn in turns
    ]


def _assemble(system: str, summary: str, wire_turns: list[list[dict]], memory: dict | None) -> list[dict]:
    if summary:
        system = f"{system}\n\n{SUMMARY_HEADING}{summary}" if system else f"{SUMMARY_HEADING}{summary}"
    head = [{"role": "system", "content": system}] if system else []
    body = [wire for turn in wire_turns for wire in turn]
    if memory is not None:
        # A user-role block (engine.memory.memory_message) before the conversation, after every
        # system message that opens it (a chat completion's own): all instructions come first.
        # It opens the first user message rather than standing as one of its own, since many
        # chat templates (Gemma's, Mistral's) refuse two user messages in a row.
        opening = next((index for index, wire in enumerate(body) if wire["role"] != "system"), len(body))
        first = body[opening] if opening < len(body) else None
        # Where the memories end is marked (MEMORY_CHARS): Anthropic's prompt cache gets a
        # breakpoint there (agents.providers.caching); other wires drop the mark.
        if first is not None and first["role"] == "user" and isinstance(first.get("content"), str):
            opened = f"{memory['content']}\n\n"
            body[opening] = {**first, "content": opened + first["content"], MEMORY_CHARS: len(opened)}
        elif first is not None and first["role"] == "user" and isinstance(first.get("content"), list):
            content = [{"type": "text", "text": memory["content"]}, *first["content"]]
            body[opening] = {**first, "content": content, MEMORY_CHARS: len(memory["content"])}
        else:
            body.insert(opening, {**memory, MEMORY_CHARS: len(memory["content"])})
    return head + body


def context_budget(snapshot: AgentSnapshot) -> int | None:
    """The agent's own budget or what the models' windows allow, whichever is smaller."""
    budgets = [b for b in (snapshot["agent"].get("context_token_budget"), history_budget(snapshot)) if b]
    return min(budgets) if budgets else None


def build_context(
    *,
    run: Run,
    owner: str,
    snapshot: AgentSnapshot,
    messages: list[Message],
    iteration: int,
    shrink: bool = False,
    memory: dict | None = None,
    converted: dict[str, dict] | None = None,
) -> list[dict]:
    """The messages to send. `shrink` folds at least half of the history's estimated size into
    the summary: the server said the request did not fit, so the estimate ran short. `memory`:
    the message showing the end user's long-term memories (engine.memory), placed before the
    conversation (after the system messages) and counted in the budget like the system prompt.
    `converted`: the parts the model does not take, turned into text by a pre-step
    (engine.part_conversion), by attachment id: {"method": …, "text": …}; they are sent as that
    text (converted_part)."""
    agent = snapshot["agent"]
    system = render_system_prompt(
        template=agent["system_prompt"], now=run.created_at, time_zone=agent["time_zone"], agent_name=agent["name"]
    )
    first_order = next((m.order for m in messages if m.run_id == run.pk), messages[-1].order)
    summary = run.conversation.context_summary if _summary_through(run, first_order) else ""
    turns = group_turns(group_units(messages))
    if agent.get("context_max_turns"):
        # A chat completion's own system message opens the conversation as a turn of its own;
        # the window keeps it, so the client's instructions are never dropped silently.
        opening = turns[:1] if turns[0][0][0].role == Message.Role.SYSTEM else []
        turns = opening + turns[len(opening) :][-agent["context_max_turns"] :]
    wire_turns = _wire_turns(turns, agent.get("context_tool_result_max_chars"), converted)
    budget = context_budget(snapshot)
    if not (budget or shrink) or len(turns) < 2:
        return _assemble(system, summary, wire_turns, memory)
    fixed = (
        estimate_prompt_tokens(messages=[{"content": system}], tools=tool_definitions(snapshot["tools"]))
        + estimate_tokens(summary)
        + (wire_tokens(memory) if memory is not None else 0)
    )
    provider = snapshot["model"]["provider"]
    fold = fold_count(wire_turns, fixed=fixed, budget=budget, shrink=shrink, provider=provider)
    if not fold:
        return _assemble(system, summary, wire_turns, memory)
    through = min(m.order for turn in turns[fold:] for unit in turn for m in unit) - 1
    summary = summarise(
        run=run,
        owner=owner,
        snapshot=snapshot,
        iteration=iteration,
        previous=summary,
        turns=turns[:fold],
        through=through,
    )
    return _assemble(system, summary, wire_turns[fold:], memory)


def fold_count(
    wire_turns: list[list[dict]], *, fixed: int, budget: int | None, shrink: bool, provider: str | None = None
) -> int:
    """How many of the oldest turns to fold into the summary. None while the context (`fixed`
    tokens of system prompt, tools, summary and memory, then the turns) fits the budget; else as
    many as bring it down to half the budget, so a summary is made now and then rather than every
    step, always keeping the newest turn. `shrink` (the server said the request did not fit, so
    the estimate ran short) folds at least half of the estimated size, within the budget or not.

    Turns are sized from the newest back, and only until the answer is known: the oldest turns
    of a long history are folded whatever their size, so they are never estimated. `provider`
    (the agent's model's kind) sizes the turns' images by its rule (agents.providers.media)."""

    def size(turn: list[dict]) -> int:
        return sum(wire_tokens(wire, provider=provider) for wire in turn)

    if shrink:
        sizes = [size(turn) for turn in wire_turns]
        total = fixed + sum(sizes)
        target, limit = min(budget // 2, total // 2) if budget else total // 2, None
    else:
        sizes, target, limit = None, budget // 2, budget
    kept, fold = fixed, 0
    for index in reversed(range(len(wire_turns))):
        kept += sizes[index] if sizes else size(wire_turns[index])
        if not fold and kept > target:
            fold = index + 1  # the turns from `index` on no longer fit in the target
        if limit is not None and kept > limit:
            break
    else:
        if limit is not None:
            return 0  # it all fits
    return min(fold, len(wire_turns) - 1)


# --- Turns


def group_units(messages: list[Message]) -> list[Unit]:
    """Tool results join the assistant message that asked for them; a result whose call is not
    in the history (it was folded into a summary) is left out."""
    used: set[int] = set()
    units = []
    for i, message in enumerate(messages):
        if message.role == Message.Role.TOOL:
            continue
        unit = [message]
        if message.role == Message.Role.ASSISTANT and message.tool_calls:
            wanted = {call["id"] for call in message.tool_calls}
            for j in range(i + 1, len(messages)):
                result = messages[j]
                if result.role == Message.Role.TOOL and j not in used and result.tool_call_id in wanted:
                    unit.append(result)
                    used.add(j)
                    wanted.discard(result.tool_call_id)
                    if not wanted:
                        break
        units.append(unit)
    return units


def group_turns(units: list[Unit]) -> list[Turn]:
    turns: list[Turn] = []
    for unit in units:
        if not turns or unit[0].role == Message.Role.USER:
            turns.append([])
        turns[-1].append(unit)
    return turns


def trimmed(content: str, limit: int | None) -> str:
    if limit is None or len(content) <= limit:
        return content
    return f"{content[:limit]}\n… [trimmed: {len(content) - limit} more characters not shown]"


def wire_tokens(wire: dict, *, provider: str | None = None) -> int:
    return estimate_message_tokens(wire, provider=provider)


# --- Summaries

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
    for part in message.parts or []:
        line += f"\n{message.role} attached the {part['type']} {part['name']}"
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

    # A summary is prose whatever the agent's answers must look like.
    answer = model_call(
        run=run,
        owner=owner,
        snapshot=snapshot,
        purpose=LLMCall.Purpose.SUMMARY,
        iteration=iteration,
        request=ModelRequest(messages=messages, plain_text=True),
    )
    text = answer.response.content.strip() or previous
    batch = answer_writes(answer)
    # Guarded, so a summary that covers less than the stored one never replaces it.
    summary = Update(Conversation).set(
        context_summary=text, context_summary_through=through, context_summary_call_id=answer.call.pk
    )
    batch.add("summary", summary.where(id=run.conversation_id, context_summary_through__lt=through))
    answer_record(answer, batch)
    run.conversation.context_summary, run.conversation.context_summary_through = text, through
    return text
