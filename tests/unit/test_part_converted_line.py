"""The run timeline says which pre-step turned which part into text (engine.part_conversion)."""

from console.monitoring.event_lines import event_lines
from conversations import events
from conversations.events import EventType


def test_a_conversion_reads_as_a_line_of_the_timeline():
    payload = events.part_converted(
        attachment_id="a1",
        kind="audio",
        name="note.wav",
        method="transcription",
        chars=27,
        llm_call_id=7,
        duration_ms=12,
    )
    event = {"seq": 3, "type": EventType.PART_CONVERTED, "payload": payload, "created_at": "2026-12-07T10:00:01+00:00"}
    export = {"run": {"started_at": "2026-12-07T10:00:00+00:00", "created_at": None}, "steps": [], "events": [event]}
    [line] = event_lines(export=export)
    assert line["text"] == "audio note.wav turned into text by transcription (27 characters)"
