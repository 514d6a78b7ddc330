"""The loop guard: a model that keeps making the same calls is told so once, then stopped.

Two patterns count, whatever the calls' validation outcome (a model repeating malformed
arguments or an unknown name loops as surely as one repeating valid calls):
- a streak: consecutive steps that each call one tool only, with any arguments;
- a cycle: the same steps, names and arguments, repeating with a period of one to three steps
  (A A A A, A B A B, A B C A B C), whatever the calls' arguments are.
Either is a loop once it spans more steps than the agent's `max_same_tool_streak`. This is a
pure function of the run's tool-call steps, so it is tested without I/O.
"""

import json
from dataclasses import dataclass

from conversations.models import Message
from tools.arguments import parse_arguments
from tools.calls import call_name

MAX_PERIOD = 3


@dataclass(frozen=True)
class Repeat:
    names: list[str]  # the tools repeated, in the order first called
    steps: int  # how many steps, the current one included, the pattern spans
    cycle: bool  # names and arguments repeat (not only the tool's name)
    earlier: list[Message]  # the pattern's steps before the current one


def _call_signature(call: dict) -> tuple[str, str]:
    name, _ = call_name(call)
    raw = (call.get("function") or {}).get("arguments")
    parsed = parse_arguments(raw)
    if parsed.arguments is not None:
        return name, json.dumps(parsed.arguments, sort_keys=True, ensure_ascii=False)
    return name, raw.strip() if isinstance(raw, str) else repr(type(raw))


def _step_signature(message: Message) -> tuple:
    # Parallel calls may come in any order: the step is the same set of calls.
    return tuple(sorted(_call_signature(call) for call in message.tool_calls))


def _names(steps: list[Message]) -> list[str]:
    names: list[str] = []
    for message in steps:
        for call in message.tool_calls:
            name, _ = call_name(call)
            if name not in names:
                names.append(name)
    return names


def _streak(steps: list[Message]) -> int:
    """How many steps, ending with the last, called only one and the same tool."""
    names = {call_name(call)[0] for call in steps[-1].tool_calls}
    if len(names) != 1:
        return 0
    count = 0
    for message in reversed(steps):
        if {call_name(call)[0] for call in message.tool_calls} != names:
            break
        count += 1
    return count


def _cycle(steps: list[Message], limit: int) -> int:
    """The length of the longest repeating tail of period 1 to 3 that makes a loop, or 0."""
    # A pattern longer than the limit shows in the last limit + 1 steps, two periods at least.
    window = steps[-max(limit + 1, 2 * MAX_PERIOD) :]
    signatures = [_step_signature(m) for m in window]
    for period in range(1, MAX_PERIOD + 1):
        length = period
        while length < len(signatures) and signatures[-length - 1] == signatures[-length - 1 + period]:
            length += 1
        if length > limit and length >= 2 * period:
            return length
    return 0


def run_steps(messages: list[Message], run_id) -> list[Message]:
    """The run's assistant messages with tool calls, in order: only this run's steps count, since
    earlier questions that needed the same tool are no loop."""
    return [m for m in messages if m.run_id == run_id and m.role == Message.Role.ASSISTANT and m.tool_calls]


def repeat_found(steps: list[Message], limit: int) -> Repeat | None:
    """`steps`: the run's assistant messages with tool calls, in order, ending with the current."""
    streak = _streak(steps)
    if streak > limit:
        return Repeat(_names(steps[-1:]), streak, False, steps[-streak:-1])
    length = _cycle(steps, limit)
    if length:
        return Repeat(_names(steps[-length:]), length, True, steps[-length:-1])
    return None
