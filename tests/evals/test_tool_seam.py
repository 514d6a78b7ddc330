"""The engine's tool step in an evaluation's run, driven in-process (so on SQLite too): given
results are recorded as simulated calls, nothing unstubbed that writes or needs a person runs."""

import pytest

from agents.models import AgentTool
from api.runs import ToolInvocationStepSerializer
from console.monitoring.timeline import run_timeline_export
from conversations.export import ledger_export_records
from conversations.models import Approval, Run, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_submit
from tests.support.runs import advance
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db

CALLS = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {
                    "tool_calls": [
                        {"name": "test-counter", "arguments": {"label": "seam"}},
                        {"name": "test-echo", "arguments": {"text": "live"}},
                    ]
                },
                {"content": "done"},
            ],
        }
    ]
}


def _eval_run(agent, sandbox):
    conversation = conversation_create(agent=agent)
    return advance(message_submit(conversation=conversation, content="go", sandbox=sandbox).run)


def _outcomes(run):
    return {
        i.tool_name: (i.status, i.simulated, i.result)
        for i in ToolInvocation.objects.filter(run=run).order_by("position")
    }


def test_a_given_result_is_simulated_and_the_write_tool_never_runs(scripted_agent, executions):
    # Approval-gated: a simulated call needs no person, since nothing happens.
    agent = scripted_agent(CALLS, tools=["test-counter", "test-echo"])
    AgentTool.objects.filter(agent=agent, tool__name="test-counter").update(approval=AgentTool.Approval.ALWAYS)
    run = _eval_run(agent, {"results": {"test-counter": "counted (simulated)"}, "live_reads": True})

    assert run.status == "completed" and executions("seam") == 0
    assert _outcomes(run) == {
        "test-counter": ("succeeded", True, "counted (simulated)"),
        "test-echo": ("succeeded", False, "live"),  # a read tool ran for real
    }
    assert not Approval.objects.filter(run=run).exists()
    # The run's timeline says which result was simulated.
    steps = [s for s in run_timeline_export(run=run, requests=True)["steps"] if s["kind"] == "tool_invocation"]
    assert [(s["tool"], s["simulated"]) for s in steps] == [("test-counter", True), ("test-echo", False)]
    # So do the API's steps and the audit export's columns.
    counter = ToolInvocation.objects.get(run=run, tool_name="test-counter")
    assert ToolInvocationStepSerializer(counter).data["simulated"] is True
    exported = next(ledger_export_records(runs=Run.objects.filter(pk=run.pk), requests=True))
    assert [(t["tool_name"], t["simulated"]) for t in exported["tool_invocations"]] == [
        ("test-counter", True),
        ("test-echo", False),
    ]


def test_without_given_results_nothing_runs(scripted_agent, executions):
    agent = scripted_agent(CALLS, tools=["test-counter", "test-echo"])
    AgentTool.objects.filter(agent=agent).update(approval=AgentTool.Approval.NEVER)
    run = _eval_run(agent, {"results": {}, "live_reads": False})

    assert run.status == "completed" and executions("seam") == 0
    outcomes = _outcomes(run)
    assert {name: outcome[:2] for name, outcome in outcomes.items()} == {
        "test-counter": ("error", False),
        "test-echo": ("error", False),
    }
    assert "this is an evaluation run" in outcomes["test-counter"][2]


def test_an_ordinary_run_still_runs_its_tools(scripted_agent, executions):
    agent = scripted_agent(CALLS, tools=["test-counter", "test-echo"])
    AgentTool.objects.filter(agent=agent).update(approval=AgentTool.Approval.NEVER)
    run = advance(message_submit(conversation=conversation_create(agent=agent), content="go").run)
    assert run.status == "completed" and executions("seam") == 1 and run.sandbox is None
    assert not ToolInvocation.objects.filter(run=run, simulated=True).exists()


def test_a_given_result_is_cut_like_the_tools_own(scripted_agent):
    agent = scripted_agent(CALLS, tools=["test-counter", "test-echo"])
    ToolDefinition.objects.filter(name="test-counter").update(max_result_chars=5)
    run = _eval_run(agent, {"results": {"test-counter": "0123456789"}, "live_reads": True})
    invocation = ToolInvocation.objects.get(run=run, tool_name="test-counter")
    assert (invocation.simulated, invocation.truncated) == (True, True)
    assert invocation.result.startswith("01234\n") and "5 more characters" in invocation.result
