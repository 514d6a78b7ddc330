"""Operators configuring models and agents in the admin get clear refusals on save."""

import pytest

from agents.models import Agent, ModelConfig
from tests.support.admin_forms import agent_admin_inlines
from tests.support.factories import ModelConfigFactory
from tools.models import ToolDefinition
from tools.services import tool_definitions_sync_from_registry

pytestmark = pytest.mark.django_db


def _agent_form(model: ModelConfig, tool: ToolDefinition, **fields) -> dict:
    data = {
        "name": "Router",
        "slug": "router",
        "system_prompt": "",
        "time_zone": "UTC",
        "language": "en",
        "model_config": model.pk,
        "max_iterations": 8,
        "max_same_tool_streak": 3,
        "tool_choice": "auto",
        "tool_choice_name": "",
        "parallel_tool_calls": "on",
        "is_active": "on",
        **agent_admin_inlines(agent_tools=1),
        "agent_tools-0-tool": tool.pk,
        "agent_tools-0-approval": "inherit",
        "agent_tools-0-enabled": "on",
    }
    data.update(fields)
    return data


def test_a_named_tool_choice_must_name_one_of_the_agents_tools(admin_client):
    tool_definitions_sync_from_registry()
    model, tool = ModelConfigFactory(), ToolDefinition.objects.get(name="test-echo")

    refused = admin_client.post(
        "/admin/agents/agent/add/", _agent_form(model, tool, tool_choice="tool", tool_choice_name="test-counter")
    )
    assert refused.status_code == 200 and not Agent.objects.exists()
    assert "which is not among this agent&#x27;s enabled tools" in refused.content.decode()

    saved = admin_client.post(
        "/admin/agents/agent/add/", _agent_form(model, tool, tool_choice="tool", tool_choice_name="test-echo")
    )
    assert saved.status_code == 302
    assert Agent.objects.get().tool_choice_name == "test-echo"


def test_a_parameter_the_provider_lacks_is_refused_with_a_reason(admin_client):
    data = {
        "name": "claude",
        "provider": "anthropic",
        "base_url": "https://api.anthropic.com/v1",
        "model": "claude-x",
        "seed": 7,
        "stop": "[]",
        "response_format": "text",
        "extra_params": "{}",
        "response_schema": "null",
        "connect_timeout_seconds": 10,
        "read_timeout_seconds": 120,
        "max_retries": 2,
        "price_input_per_million": 0,
        "price_output_per_million": 0,
        "price_cached_input_per_million": 0,
    }
    refused = admin_client.post("/admin/agents/modelconfig/add/", data)
    assert refused.status_code == 200 and not ModelConfig.objects.exists()
    assert "Anthropic Messages has no seed" in refused.content.decode()

    data["seed"] = ""
    assert admin_client.post("/admin/agents/modelconfig/add/", data).status_code == 302
    assert ModelConfig.objects.get().provider == "anthropic"


def test_guardrail_rules_are_validated_by_the_agent_form(admin_client):
    tool_definitions_sync_from_registry()
    model, tool = ModelConfigFactory(), ToolDefinition.objects.get(name="test-echo")
    rule = {
        "guardrail_rules-TOTAL_FORMS": 1,
        "guardrail_rules-0-side": "input",
        "guardrail_rules-0-kind": "blocked_pattern",
        "guardrail_rules-0-action": "block",
        "guardrail_rules-0-terms": "",
        "guardrail_rules-0-enabled": "on",
    }

    # RE2 syntax: what it refuses is named in the form's error.
    for pattern, why in [
        ("(unclosed", "not a valid RE2 regular expression"),
        (r"(?<=卡号)\d+", "lookahead and lookbehind"),
        (r"(a)\1", "backreferences such as"),
    ]:
        refused = admin_client.post(
            "/admin/agents/agent/add/", _agent_form(model, tool, **rule, **{"guardrail_rules-0-pattern": pattern})
        )
        assert refused.status_code == 200 and not Agent.objects.exists()
        assert why in refused.content.decode()

    terms_without_terms = {**rule, "guardrail_rules-0-kind": "blocked_terms", "guardrail_rules-0-pattern": ""}
    refused = admin_client.post("/admin/agents/agent/add/", _agent_form(model, tool, **terms_without_terms))
    assert refused.status_code == 200 and "List at least one term." in refused.content.decode()

    saved = admin_client.post(
        "/admin/agents/agent/add/",
        _agent_form(model, tool, **rule, **{"guardrail_rules-0-pattern": r"(?i)secret-\d{4}"}),
    )
    assert saved.status_code == 302
    assert list(Agent.objects.get().guardrail_rules.values_list("kind", "pattern")) == [
        ("blocked_pattern", r"(?i)secret-\d{4}")
    ]


def _model_form(**fields) -> dict:
    return {
        "name": "vision",
        "provider": "openai_compatible",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
        "stop": "[]",
        "response_format": "text",
        "extra_params": "{}",
        "response_schema": "null",
        "connect_timeout_seconds": 10,
        "read_timeout_seconds": 120,
        "max_retries": 2,
        "price_input_per_million": 0,
        "price_output_per_million": 0,
        "price_cached_input_per_million": 0,
        **fields,
    }


def test_the_model_config_form_says_what_the_model_takes_and_what_its_audio_costs(admin_client):
    page = admin_client.get("/admin/agents/modelconfig/add/").content.decode()
    assert 'name="input_kinds"' in page and 'name="price_audio_input_per_million"' in page

    refused = admin_client.post("/admin/agents/modelconfig/add/", _model_form(input_kinds='["image"]'))
    assert refused.status_code == 200 and not ModelConfig.objects.exists()
    assert "text included" in refused.content.decode()

    taken = _model_form(input_kinds='["text", "image", "audio"]', price_audio_input_per_million="40")
    assert admin_client.post("/admin/agents/modelconfig/add/", taken).status_code == 302
    config = ModelConfig.objects.get()
    assert config.input_kinds == ["text", "image", "audio"] and config.price_audio_input_per_million == 40

    # Left empty: text only, audio priced as input.
    plain = _model_form(name="plain", input_kinds="", price_audio_input_per_million="")
    assert admin_client.post("/admin/agents/modelconfig/add/", plain).status_code == 302
    config = ModelConfig.objects.get(name="plain")
    assert config.input_kinds == ["text"] and config.price_audio_input_per_million == 0
