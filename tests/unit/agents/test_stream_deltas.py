"""Streamed tool-call deltas are what a server (and through it a model) sent: untrusted. Odd
shapes are read as well as they can be, never allocated from or crashed on."""

import pytest

from agents.providers.openai_compatible import _merge_tool_delta


def test_an_absurd_index_does_not_grow_the_list_to_match_it():
    calls: list[dict] = []
    _merge_tool_delta(calls, {"index": 10**9, "id": "a", "function": {"name": "test-echo", "arguments": "{}"}}, 0)
    _merge_tool_delta(calls, {"index": -5, "function": {"arguments": ""}}, 0)
    assert [c["name"] for c in calls] == ["test-echo"]


@pytest.mark.parametrize("part", [None, "text", 7, ["x"], {"function": "no object"}, {"id": 12, "function": {}}])
def test_a_delta_that_is_no_object_is_skipped(part):
    calls: list[dict] = [{"id": "a", "name": "test-echo", "arguments": '{"text"'}]
    _merge_tool_delta(calls, part, 0)
    assert calls == [{"id": "a", "name": "test-echo", "arguments": '{"text"'}]


def test_a_name_that_is_no_string_becomes_text_the_engine_refuses_as_unknown():
    calls: list[dict] = []
    _merge_tool_delta(calls, {"index": 0, "id": "a", "function": {"name": {"x": 1}, "arguments": "{}"}}, 0)
    assert calls == [{"id": "a", "name": '{"x": 1}', "arguments": "{}"}]


def test_servers_that_count_from_one_still_get_one_call():
    calls: list[dict] = []
    for fragment in ('{"text"', ': "a"}'):
        _merge_tool_delta(calls, {"index": 1, "id": "a", "function": {"name": "test-echo", "arguments": fragment}}, 0)
    assert [c for c in calls if c["name"]] == [{"id": "a", "name": "test-echo", "arguments": '{"text": "a"}'}]
