"""Repeated tool-call patterns a model falls into are found from its steps (engine.next_step's loop guard);
what a run does with them is in tests/engine/test_loop_quirks.py."""

import pytest

from conversations.models import Message
from engine.next_step import repeat_found


def steps(*signatures):
    """Unsaved assistant messages, one per step, each a list of (name, arguments text)."""
    return [
        Message(
            role="assistant",
            tool_calls=[
                {"id": f"c{i}{j}", "type": "function", "function": {"name": name, "arguments": arguments}}
                for j, (name, arguments) in enumerate(step)
            ],
        )
        for i, step in enumerate(signatures)
    ]


A, B, C = [("a", '{"x": 1}')], [("b", "{}")], [("c", "not json")]


@pytest.mark.parametrize(
    "history,found",
    [
        ([A, B, A, B], True),
        ([B, A, B, A, B], True),
        ([A, B, C, A, B, C], True),
        ([A, B, A], False),
        ([A, B, C, A, B], False),
        ([[("a", '{"x": 1}'), ("b", "{}")]] * 4, True),  # the same parallel calls, step after step
        ([[("a", '{"x": 1}')], [("a", '{"x": 2}')], [("a", '{"x": 3}')], [("a", '{"x": 4}')]], True),  # one tool
        (
            [
                [("a", '{"x": 1}'), ("b", "{}")],
                [("a", '{"x": 2}'), ("b", "{}")],
                [("a", '{"x": 3}'), ("b", "{}")],
                [("a", '{"x": 4}'), ("b", "{}")],
            ],
            False,
        ),  # new arguments each time, two tools: progress
        ([[("a", '{"x": 1, "y": 2}')], [("b", "{}")], [("a", '{"y": 2, "x": 1}')], [("b", " {} ")]], True),
    ],
)
def test_repeated_call_patterns(history, found):
    assert (repeat_found(steps(*history), limit=3) is not None) == found
