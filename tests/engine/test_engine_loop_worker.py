"""A worker process carries its runs on its engine loop (engine.reactor): several runs at once
through one loop, their tools on the tool executors' threads, their ledger complete as on any other path."""

import json

import pytest

from conversations.models import Run, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.llm import agent_on, assert_totals_match_calls
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

SCRIPT = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {"tool_calls": [{"name": "test-where", "arguments": {}}], "latency_ms": 300},
                {"content": "ran in {last_tool_result}", "latency_ms": 300},
            ],
        }
    ]
}


def test_a_worker_carries_its_runs_on_its_engine_loop(worker, fake_llm):
    agent = agent_on(fake_llm, SCRIPT, tools=["test-where"])
    runs = [message_post(conversation=conversation_create(agent=agent), content=f"where {n}") for n in range(12)]
    wait_for(
        lambda: Run.objects.filter(pk__in=[r.pk for r in runs], status="completed").count() == len(runs),
        timeout=60,
        message="every run to complete",
    )
    for run in runs:
        [invocation] = ToolInvocation.objects.filter(run=run)
        # The worker runs an engine loop, and tools (blocking code) ran on the executors' threads,
        # which the loop awaited: no offload thread waited in between.
        ran = json.loads(invocation.result)
        assert invocation.status == "succeeded" and ran["on"] == "tool", ran
        assert "engine-loop" in ran["threads"], ran
        assert_totals_match_calls(run)
