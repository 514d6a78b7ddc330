"""RunEvent types: one enumeration, one payload builder per type, and the events a run really
writes are all of them spelled by it."""

import json

import pytest

from conversations.events import (
    EventType,
)
from conversations.models import RunEvent
from tests.support.runs import advance, start_run

pytestmark = pytest.mark.django_db


def test_a_run_writes_only_enumerated_types_with_json_payloads(scripted_agent):
    agent = scripted_agent(
        {
            "scenarios": [
                {
                    "match": ".",
                    "steps": [
                        {"tool_calls": [{"name": "test-echo", "arguments": {"text": "hi"}}]},
                        {"content": "done"},
                    ],
                }
            ]
        },
        tools=["test-echo"],
    )
    run = advance(start_run(agent))

    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", "payload"))
    types = [event_type for event_type, _ in events]
    assert set(types) <= set(EventType)
    assert types[0] == EventType.RUN_QUEUED and types[-1] == EventType.RUN_COMPLETED
    assert {
        EventType.LLM_CALL_STARTED,
        EventType.LLM_CALL_COMPLETED,
        EventType.TOOL_STARTED,
        EventType.TOOL_COMPLETED,
    } <= set(types)
    for _, payload in events:
        assert json.loads(json.dumps(payload)) == payload
