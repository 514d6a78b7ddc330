"""Operators' configuration: validation, secrets at rest, immutable versions, read-only ledger."""

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.urls import reverse

from agents.models import Agent, AgentTool, ModelConfig
from agents.prompting import render_system_prompt
from agents.services import agent_version_current
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.runs import advance, start_run
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db


def test_tool_schema_that_is_not_json_schema_is_rejected():
    tool = ToolDefinition(
        name="bad", description="d", parameters={"type": "object", "properties": {"x": {"type": "strnig"}}}
    )
    with pytest.raises(ValidationError) as error:
        tool.full_clean()
    assert "Not a valid JSON Schema" in str(error.value)


def test_tool_schema_must_describe_an_object_and_name_follow_provider_rules():
    tool = ToolDefinition(name="has space", description="d", parameters={"type": "string"})
    with pytest.raises(ValidationError) as error:
        tool.full_clean()
    assert {"name", "parameters"} <= set(error.value.message_dict)


def test_python_tool_must_be_registered():
    tool = ToolDefinition(name="ghost", description="d", parameters={"type": "object"})
    with pytest.raises(ValidationError) as error:
        tool.full_clean()
    assert "No python tool 'ghost' is registered" in str(error.value)


def test_api_key_is_encrypted_at_rest_and_never_shown(admin_client):
    model = ModelConfigFactory(api_key="sk-live-1234567890abcdef")
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key FROM agents_modelconfig WHERE id = %s", [model.pk])
        stored = cursor.fetchone()[0]
    assert "sk-live" not in stored and stored.startswith("gAAAA")
    assert ModelConfig.objects.get(pk=model.pk).api_key == "sk-live-1234567890abcdef"

    page = admin_client.get(reverse("admin:agents_modelconfig_change", args=[model.pk])).content.decode()
    assert "sk-live-1234567890abcdef" not in page and "cdef" in page

    form = admin_client.get(reverse("admin:agents_modelconfig_change", args=[model.pk]))
    data = {k: v for k, v in form.context["adminform"].form.initial.items() if v is not None}
    data.update({"name": model.name, "base_url": model.base_url, "model": model.model, "new_api_key": ""})
    admin_client.post(reverse("admin:agents_modelconfig_change", args=[model.pk]), data)
    assert ModelConfig.objects.get(pk=model.pk).api_key == "sk-live-1234567890abcdef"


def test_system_prompt_renders_seed_000_date_in_the_agents_time_zone():
    text = render_system_prompt(
        template="今天是 {{ now_cn }} 。# 角色\n你是一名强子开发的智能客服。\n\n",
        now=datetime(2026, 2, 28, 7, 5, 30, tzinfo=UTC),
        time_zone="Asia/Shanghai",
        agent_name="智能客服",
    )
    assert text == "今天是 2026年02月28日 15时05分30秒 星期六 。# 角色\n你是一名强子开发的智能客服。\n\n"


def test_system_prompt_is_prompt_text_not_html():
    text = render_system_prompt(
        template="Answer A & B in <b>bold</b>, as {{ agent_name }} says: \"quoted\" and 'single'.",
        now=datetime(2026, 2, 28, 7, 5, 30, tzinfo=UTC),
        time_zone="Asia/Shanghai",
        agent_name="R&D <bot>",
    )
    assert text == "Answer A & B in <b>bold</b>, as R&D <bot> says: \"quoted\" and 'single'."


def test_editing_an_agent_makes_a_new_version_and_old_runs_keep_theirs(no_enqueue):
    agent = make_agent(tools=["test-echo"])
    first = start_run(agent)
    assert agent_version_current(agent=agent) == first.agent_version

    Agent.objects.filter(pk=agent.pk).update(system_prompt="Changed.", max_iterations=3)
    AgentTool.objects.filter(agent=agent).delete()
    agent.refresh_from_db()
    second = start_run(agent)

    assert second.agent_version.number == first.agent_version.number + 1
    first.agent_version.refresh_from_db()
    assert first.agent_version.snapshot["agent"]["system_prompt"] == "You are a test agent."
    assert [t["name"] for t in first.agent_version.snapshot["tools"]] == ["test-echo"]
    assert second.agent_version.snapshot["tools"] == []
    assert "api_key" not in first.agent_version.snapshot["model"]


def test_ledger_is_read_only_in_the_admin(admin_client, scripted_agent):
    agent = scripted_agent(
        {
            "scenarios": [
                {
                    "match": ".",
                    "steps": [
                        {"tool_calls": [{"name": "test-echo", "arguments": {"text": "hi"}}]},
                        {"content": "done"},
                    ],
                }
            ]
        },
        tools=["test-echo"],
    )
    run = advance(start_run(agent))

    page = admin_client.get(reverse("admin:conversations_run_change", args=[run.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    # The timeline: both model calls and the tool call in order, with tokens and arguments.
    assert html.index("LLM call</strong> step 1.1") < html.index("test-echo") < html.index("LLM call</strong> step 2.1")
    assert "{&quot;text&quot;: &quot;hi&quot;}" in html or "&quot;text&quot;" in html
    for model in ["run", "llmcall", "toolinvocation", "approval", "runevent", "conversation"]:
        assert admin_client.get(reverse(f"admin:conversations_{model}_add")).status_code == 403
    assert (
        admin_client.post(reverse("admin:conversations_run_delete", args=[run.pk]), {"post": "yes"}).status_code == 403
    )
    change = admin_client.post(reverse("admin:conversations_run_change", args=[run.pk]), {"status": "failed"})
    assert change.status_code == 403
    run.refresh_from_db()
    assert run.status == "completed"
    assert (
        admin_client.get(reverse("admin:conversations_run_changelist") + "?status__exact=completed").status_code == 200
    )


def test_registry_sync_button_creates_tool_definitions(admin_client):
    response = admin_client.post(reverse("admin:tools_tooldefinition_sync"))
    assert response.status_code == 302
    assert set(ToolDefinition.objects.values_list("name", flat=True)) >= {
        "mojitianqi-DayWeather",
        "gaodedetu-plan_driving",
        "gaodedetu-plan_bicycle",
    }
