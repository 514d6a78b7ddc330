"""The messages a model call sends: the system prompt, then the conversation so far.

Earlier runs that ended half-way (cancelled while a tool call waited for approval, say) can
leave an assistant tool-call message without all its results; providers reject such a
history, so those fragments are left out rather than blocking the conversation forever.
"""

from django.db.models import Q

from agents.prompting import render_system_prompt
from conversations.models import Message, Run


def message_to_wire(message: Message) -> dict:
    wire = {"role": message.role, "content": message.content}
    if message.role == Message.Role.ASSISTANT and message.tool_calls:
        wire["tool_calls"] = message.tool_calls
    if message.role == Message.Role.TOOL:
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


def conversation_messages(run: Run) -> list[Message]:
    """Everything before this run's first message, plus the run's own messages."""
    first = Message.objects.filter(run=run).order_by("order").values_list("order", flat=True).first()
    history = Message.objects.filter(conversation_id=run.conversation_id).filter(
        Q(order__lt=first) | Q(run=run)
    ).order_by("order")
    return _drop_unanswered_tool_calls(list(history), run.pk)


def build_wire_messages(*, run: Run, snapshot: dict, messages: list[Message]) -> list[dict]:
    agent = snapshot["agent"]
    system = render_system_prompt(
        template=agent["system_prompt"], now=run.created_at, time_zone=agent["time_zone"], agent_name=agent["name"]
    )
    wire = [{"role": "system", "content": system}] if system else []
    return wire + [message_to_wire(m) for m in messages]
