"""The run timeline says when an answer was sent back for not matching the output schema."""

from console.monitoring.event_lines import event_lines
from conversations import events
from conversations.events import EventType


def test_a_repair_turn_reads_as_a_line_of_the_timeline():
    payload = events.answer_repair(llm_call_id=7, repair=1, of=2, errors=["at $: 'total' is a required property"])
    event = {"seq": 5, "type": EventType.ANSWER_REPAIR, "payload": payload, "created_at": "2026-12-07T10:00:01+00:00"}
    export = {"run": {"started_at": "2026-12-07T10:00:00+00:00", "created_at": None}, "steps": [], "events": [event]}
    [line] = event_lines(export=export)
    assert line["text"] == (
        "Answer not in the schema, sent back to the model (repair 1 of 2) · at $: 'total' is a required property"
    )
