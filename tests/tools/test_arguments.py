"""Tolerant parsing, strict validation: nothing invalid reaches a tool, and the model is told why."""

import pytest

from conversations.models import ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from engine.loop import run_advance
from tests.support.factories import ModelConfigFactory, make_agent

SCRIPT = {
    "scenarios": [
        {
            "match": "go",
            "steps": [
                {
                    "tool_calls": [
                        {"id": "c1", "name": "no_such_tool", "arguments": {}},
                        {"id": "c2", "name": "calculator", "arguments": {"expression": "1+1", "precision": 2}},
                        {"id": "c3", "name": "calculator", "arguments": 'Sure! {"expression": "6*7"}'},
                        {"id": "c4", "name": "calculator", "arguments": "expression: 6*7"},
                    ]
                },
                {"content": "done"},
            ],
        }
    ]
}


@pytest.mark.django_db
def test_a_run_reports_bad_calls_to_the_model_and_runs_only_valid_ones(fake_llm, no_enqueue):
    fake_llm.script("arguments-test", SCRIPT)
    agent = make_agent(
        tools=["calculator", "current_time"],
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="arguments-test"),
    )
    run = message_post(conversation=conversation_create(agent=agent), content="go")
    run_advance(run_id=run.pk)

    results = {i.tool_call_id: i for i in ToolInvocation.objects.filter(run=run)}
    assert results["c1"].status == "error"
    assert results["c1"].result == "There is no tool named 'no_such_tool'. Available tools: calculator, current_time."
    assert results["c2"].status == "error" and results["c2"].started_at is None
    assert "Unsupported argument(s) precision; this tool accepts only: expression." in results["c2"].result
    assert results["c3"].status == "succeeded" and '"result":42' in results["c3"].result
    assert results["c4"].status == "error" and "not valid JSON" in results["c4"].result
    run.refresh_from_db()
    assert run.status == "completed"
