"""bench.timeline's intervals: one per pair of consecutive events, a model call's without the
model's latency, and the last one to the response."""

import pytest

from bench.timeline import _intervals


def test_each_interval_runs_from_one_event_to_the_next():
    events = [
        ("run.queued", 10.005),
        ("run.running", 10.009),
        ("llm_call.started", 10.011),
        ("llm_call.completed", 10.216),
        ("tool.started", 10.2162),
        ("tool.completed", 10.220),
        ("llm_call.started", 10.221),
        ("llm_call.completed", 10.426),
        ("run.completed", 10.4262),
    ]
    named = _intervals(10.0, 10.434, events, 0.2)

    assert [name for name, _ in named] == [
        "request sent → run.queued",
        "run.queued → run.running",
        "run.running → model call 1 started",
        "model call 1 started → model call 1 answered (beyond the model's 200 ms)",
        "model call 1 answered → tool 1 started",
        "tool 1 started → tool 1 recorded",
        "tool 1 recorded → model call 2 started",
        "model call 2 started → model call 2 answered (beyond the model's 200 ms)",
        "model call 2 answered → run.completed",
        "run.completed → response received",
    ]
    spent = [seconds * 1000 for _, seconds in named]
    assert spent == pytest.approx([5, 4, 2, 5, 0.2, 3.8, 1, 5, 0.2, 7.8], abs=1e-6)
