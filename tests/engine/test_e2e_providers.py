"""The same conversation through a real worker, once per wire format: the ledgers match."""

import pytest

from conversations.models import LLMCall, Message, Run, RunEvent, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.llm import agent_on, assert_totals_match_calls
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

SCRIPT = {
    "scenarios": [
        {
            "match": r"echo (?P<a>\w+) and (?P<b>\w+)",
            "steps": [
                {
                    "content": "Echoing both.",
                    "fault": {"status": 500, "times": 1},
                    "tool_calls": [
                        {"name": "test-echo", "arguments": {"text": "{a}"}},
                        {"name": "test-echo", "arguments": {"text": "{b}", "times": 2}},
                    ],
                    "usage": {"prompt_tokens": 300, "completion_tokens": 40, "cached_tokens": 120},
                },
                {
                    "content": "Both echoed: {last_tool_result}.",
                    "usage": {"prompt_tokens": 380, "completion_tokens": 12, "cached_tokens": 300},
                },
            ],
        }
    ]
}


def _ledger(run: Run) -> dict:
    """What an auditor reads of a run, without ids, timings or provider-specific raw bodies."""
    return {
        "run": (
            run.status,
            run.stop_reason,
            run.iterations,
            run.prompt_tokens,
            run.completion_tokens,
            run.cached_tokens,
            run.reasoning_tokens,
            run.total_tokens,
            run.cost,
        ),
        "calls": [
            (
                c.purpose,
                c.iteration,
                c.attempt,
                c.status,
                c.http_status,
                c.finish_reason,
                c.prompt_tokens,
                c.completion_tokens,
                c.cached_tokens,
                c.total_tokens,
                c.usage_estimated,
                c.cost,
            )
            for c in LLMCall.objects.filter(run=run).order_by("purpose", "iteration", "attempt")
        ],
        "tools": [
            (t.tool_name, t.position, t.arguments, t.status, t.result)
            for t in ToolInvocation.objects.filter(run=run).order_by("created_at", "position")
        ],
        "messages": [
            (m.role, m.content, [c["function"]["name"] for c in m.tool_calls or []])
            for m in Message.objects.filter(run=run).order_by("order")
        ],
        "events": [e.type for e in RunEvent.objects.filter(run=run).exclude(type="message.delta").order_by("seq")],
    }


def _finish(run: Run) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run.pk, status__in=["completed", "failed"]).first(),
        timeout=30,
        message=f"run {run.pk} to end",
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_anthropic_and_openai_runs_leave_the_same_ledger(worker, fake_llm, stream):
    ledgers = {}
    for provider in ("openai_compatible", "anthropic"):
        agent = agent_on(fake_llm, SCRIPT, provider=provider, stream=stream)
        run = _finish(message_post(conversation=conversation_create(agent=agent), content="echo ping and pong"))
        assert_totals_match_calls(run)
        ledgers[provider] = _ledger(run)

    assert ledgers["anthropic"] == ledgers["openai_compatible"]
    ledger = ledgers["anthropic"]
    assert ledger["run"][:3] == ("completed", "final_answer", 2)
    assert [(c[2], c[3], c[4]) for c in ledger["calls"]] == [
        (1, "failed", 500),
        (2, "succeeded", 200),
        (1, "succeeded", 200),
    ]
    assert ledger["tools"] == [
        ("test-echo", 0, {"text": "ping"}, "succeeded", "ping"),
        ("test-echo", 1, {"text": "pong", "times": 2}, "succeeded", "pongpong"),
    ]
    assert ledger["messages"][-1] == ("assistant", "Both echoed: pongpong.", [])
    assert ledger["run"][3:8] == (680, 52, 420, 0, 732)
