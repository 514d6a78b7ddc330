"""The prompt playground on a real worker and the fake model: the edited draft (another model
config, a write tool added) and the live version answer the same message differently, each run
on the queue to its end; the draft's write tool call is refused unrun, never executed."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from agents.releases import version_publish
from conversations.models import Run, RunTrigger, ToolInvocation
from engine.invocations import NOT_RUN_IN_PLAYGROUND
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for
from tools.models import ToolDefinition

pytestmark = [pytest.mark.e2e]

LIVE_SCRIPT = {"scenarios": [{"match": ".", "steps": [{"content": "Live answer: sunny."}]}]}
DRAFT_SCRIPT = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {"tool_calls": [{"name": "test-counter", "arguments": {"label": "playground-e2e"}}]},
                {"content": "Draft answer after: {last_tool_result}"},
            ],
        }
    ]
}


def _finished(run_id) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run_id, finished_at__isnull=False).first(), message=f"run {run_id} to end"
    )


def test_draft_and_live_answer_side_by_side_on_a_worker(worker, fake_llm, executions, client):
    live_model = ModelConfigFactory(
        name="live", base_url=fake_llm.api_base, model=fake_llm.script("pg-live", LIVE_SCRIPT)
    )
    draft_model = ModelConfigFactory(
        name="draft", base_url=fake_llm.api_base, model=fake_llm.script("pg-draft", DRAFT_SCRIPT)
    )
    operator = get_user_model().objects.create_user("pg-op", password="pw", is_staff=True, is_superuser=True)
    agent = make_agent(slug="pg-agent", system_prompt="Be helpful.", model_config=live_model, tools=["test-echo"])
    version_publish(agent=agent, user=operator, note="first")
    client.force_login(operator)
    tools = ToolDefinition.objects.filter(workspace_id=agent.workspace_id, name__in=["test-echo", "test-counter"])

    response = client.post(
        reverse("monitoring:playground-send", args=[agent.slug]),
        {
            "system_prompt": "Be brief.",
            "model_config": draft_model.pk,
            "max_iterations": 4,
            "max_same_tool_streak": 3,
            "tool_choice": "auto",
            "parallel_tool_calls": "on",
            "tools": [tool.pk for tool in tools],
            "content": "Weather in Hangzhou?",
        },
    )
    assert response.status_code == 201, response.content
    data = response.json()
    draft, live = _finished(data["draft"]["run_id"]), _finished(data["live"]["run_id"])

    assert draft.status == live.status == "completed"
    assert draft.trigger == live.trigger == RunTrigger.PLAYGROUND
    draft_events = client.get(data["draft"]["events_url"]).json()
    live_events = client.get(data["live"]["events_url"]).json()
    assert live_events["answer"] == "Live answer: sunny."
    assert draft_events["answer"].startswith("Draft answer after: Tool test-counter was not run")
    assert draft_events["run"]["total_tokens"] > 0 and live_events["run"]["total_tokens"] > 0
    assert [call["tool"] for call in draft_events["tool_calls"]] == ["test-counter"]
    assert live_events["tool_calls"] == []
    call = ToolInvocation.objects.get(run=draft)
    assert call.status == ToolInvocation.Status.ERROR and call.error == NOT_RUN_IN_PLAYGROUND
    assert executions("playground-e2e") == 0
    # Each run's timeline opens.
    assert client.get(data["draft"]["timeline_url"]).status_code == 200
    # The draft ran the edited prompt; live traffic's version is untouched.
    assert draft.agent_version.snapshot["agent"]["system_prompt"] == "Be brief."
    agent.refresh_from_db()
    assert agent.system_prompt == "Be helpful." and agent.published_version_id == live.agent_version_id
