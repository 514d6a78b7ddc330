"""The run timeline shows what a long tool call reported (a remote agent's task: tools.remote_agents)."""

from console.monitoring.event_lines import event_lines
from conversations import events
from conversations.events import EventType


def test_a_progress_report_reads_as_a_line_of_the_timeline():
    details = {"a2a": {"task_id": "t-1", "context_id": "c-1", "state": "working"}}
    payload = events.tool_progress(tool_invocation_id=4, tool="echo-agent", details=details)
    event = {"seq": 5, "type": EventType.TOOL_PROGRESS, "payload": payload, "created_at": "2026-12-07T10:00:01+00:00"}
    export = {"run": {"started_at": "2026-12-07T10:00:00+00:00", "created_at": None}, "steps": [], "events": [event]}
    [line] = event_lines(export=export)
    assert line["text"].startswith("Tool echo-agent reports {")
    assert '"task_id": "t-1"' in line["text"] and '"state": "working"' in line["text"]
