"""History cut into the pieces the context policy may keep, trim or fold, but never split.

A *unit* is one message, or an assistant message with tool calls together with the results
answering them (placed right after it, as providers require). A *turn* is a user message and
the units that follow it up to the next user message.
"""

from agents.providers.base import estimate_message_tokens
from conversations.models import Message

Unit = list[Message]
Turn = list[Unit]


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


def wire_tokens(wire: dict) -> int:
    return estimate_message_tokens(wire)
