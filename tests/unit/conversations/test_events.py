"""RunEvent types: one enumeration, one payload builder per type, and the events a run really
writes are all of them spelled by it."""

import inspect
import re
from pathlib import Path

import pytest

from conversations.events import (
    PAYLOAD_BUILDERS,
    TERMINAL_EVENT_TYPES,
    EventType,
    run_cancel_requested,
    run_ended,
    run_queued,
    run_requeued,
)
from conversations.models import TERMINAL_STATUSES, RunStatus


def test_every_type_has_a_builder_taking_keyword_arguments_only():
    assert set(PAYLOAD_BUILDERS) == set(EventType)
    for event_type, builder in PAYLOAD_BUILDERS.items():
        kinds = {p.kind for p in inspect.signature(builder).parameters.values()}
        assert kinds <= {inspect.Parameter.KEYWORD_ONLY}, event_type


def test_terminal_events_are_the_terminal_statuses():
    assert {EventType.run_ended(status) for status in TERMINAL_STATUSES} == TERMINAL_EVENT_TYPES
    assert EventType.run_ended(RunStatus.EXPIRED) == "run.expired"
    for status in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL, "done"):
        with pytest.raises(ValueError):
            EventType.run_ended(status)


def test_builders_keep_the_payload_shapes_clients_read():
    assert run_queued(agent_version=3) == {"agent_version": 3}
    assert run_queued(agent_version=3, waiting_for=["r1"]) == {"agent_version": 3, "waiting_for": ["r1"]}
    assert run_queued(reason="retry") == {"reason": "retry"}
    assert run_requeued(reason="lease lapsed") == {"reason": "lease lapsed"}
    assert set(
        run_requeued(
            reason="operator", by="ops", by_id=1, previous_status="running", previous_owner="w1", lease_expires_at=None
        )
    ) == {"reason", "by", "by_id", "previous_status", "previous_owner", "lease_expires_at"}
    assert run_cancel_requested(by=None) == {"by": None}
    assert run_cancel_requested(by="ops", by_id=7) == {"by": "ops", "by_id": 7}
    assert run_ended(stop_reason="final_answer") == {"stop_reason": "final_answer", "error": ""}
    assert run_ended(stop_reason="cancelled", instead_of="final_answer") == {
        "stop_reason": "cancelled",
        "error": "",
        "instead_of": "final_answer",
    }


def test_no_module_spells_an_event_type_itself():
    """Writers and readers use EventType; a string literal would drift from it unnoticed."""
    root = Path(__file__).resolve().parents[3]
    literal = re.compile(r"""["'](%s)["']|f["']run\.\{""" % "|".join(re.escape(t.value) for t in EventType))
    offenders = []
    for app in ("platform_site", "tools", "agents", "conversations", "engine", "api", "console", "demo"):
        for path in (root / app).rglob("*.py"):
            if path.name == "events.py" and path.parent.name == "conversations" or "migrations" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if literal.search(line):
                    offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert offenders == []
