"""The agent-version snapshot: the typed structures describe exactly what is stored, equal
configurations pin the same version, and a stored snapshot is checked when it is read."""

from datetime import time

import pytest

from agents.guardrails import GuardrailSpec, GuardrailsSnapshot
from agents.models import Agent, AgentTool, GuardrailRule, ModelConfig, RoutingRule
from agents.services import agent_version_current
from agents.snapshot import (
    AgentSettings,
    AgentSnapshot,
    ConversionsSnapshot,
    ModelSnapshot,
    RoutingRuleSpec,
    RoutingSnapshot,
    ToolApproval,
    ToolHttp,
    ToolSpec,
    snapshot_build,
    snapshot_hash,
    snapshot_models,
    snapshot_parse,
    snapshot_tool,
)
from tests.support.factories import ModelConfigFactory, make_agent
from tools.models import ToolDefinition


def _keys(typed) -> set[str]:
    return set(typed.__annotations__)


def _http_tool() -> ToolDefinition:
    tool = ToolDefinition(
        name="lookup-order",
        description="Look up an order.",
        kind="http",
        http_url="https://orders.example.com/orders",
        http_method="GET",
        parameters={"type": "object", "properties": {}},
    )
    tool.full_clean()
    tool.save()
    return tool


@pytest.mark.django_db
def test_the_types_name_every_stored_key_and_no_other():
    # Optional keys present: models that keep to a schema (structured_output) and take images,
    # price audio apart, parts turned into text by models of their own (a transcription config's keys: purpose, price).
    # Prompt caching other than auto, cache writes priced apart.
    seeing = {
        "structured_output": True,
        "input_kinds": ["text", "image"],
        "price_audio_input_per_million": "40",
        "prompt_caching": "off",
        "price_cache_write_per_million": "3.75",
    }
    agent = make_agent(
        tools=["test-echo"],
        model_config=ModelConfigFactory(**seeing),
        fallback_model_config=ModelConfigFactory(**seeing),
        memory_enabled=True,
        audio_parts="transcribe",
        transcription_model_config=ModelConfigFactory(
            purpose="transcription",
            price_audio_per_minute="0.006",
            price_audio_input_per_million="40",
            structured_output=True,
            input_kinds=["text", "audio"],
            prompt_caching="on",
            price_cache_write_per_million="3.75",
        ),
        image_parts="describe",
        description_model_config=ModelConfigFactory(**seeing),
        # Answers in a schema: the version pins the schema and its repair turns.
        output_schema={"type": "object"},
    )
    AgentTool.objects.create(agent=agent, tool=_http_tool())
    GuardrailRule.objects.create(agent=agent, side="input", kind="blocked_terms", terms="x", action="block")
    GuardrailRule.objects.create(agent=agent, side="output", kind="blocked_pattern", pattern="y+", action="flag")
    GuardrailRule.objects.create(agent=agent, side="both", kind="pii_email", action="redact")
    routed = ModelConfigFactory(**seeing)
    RoutingRule.objects.create(agent=agent, condition="input_length", length_over=9, model_config=routed)
    RoutingRule.objects.create(agent=agent, condition="attachments", attachment_kind="image", model_config=routed)
    RoutingRule.objects.create(agent=agent, condition="tier", tiers="gold", model_config=routed)
    RoutingRule.objects.create(
        agent=agent, condition="time_of_day", time_start=time(9), time_end=time(17), model_config=routed
    )
    RoutingRule.objects.create(
        agent=agent,
        condition="classifier",
        classifier_model=routed,
        classifier_prompt="Label it.",
        labels="a",
        model_config=routed,
    )
    snapshot = snapshot_build(agent=agent)

    assert set(snapshot) == _keys(AgentSnapshot)
    assert set(snapshot["routing"]) == _keys(RoutingSnapshot)
    rules = snapshot["routing"]["rules"]
    assert set().union(*rules) == _keys(RoutingRuleSpec)
    assert all(set(rule["model"]) == set(snapshot["model"]) for rule in rules)
    assert set(snapshot["guardrails"]) == _keys(GuardrailsSnapshot)
    terms, pattern, pii = snapshot["guardrails"]["rules"]
    assert set(terms) == GuardrailSpec.__required_keys__ | {"terms"}
    assert set(pattern) == GuardrailSpec.__required_keys__ | {"pattern"}
    assert set(pii) == GuardrailSpec.__required_keys__
    assert set(snapshot["agent"]) == _keys(AgentSettings)
    chat_keys = _keys(ModelSnapshot) - {"purpose", "price_audio_per_minute"}
    assert set(snapshot["model"]) == set(snapshot["fallback_model"]) == chat_keys
    conversions = snapshot["conversions"]
    assert set(conversions) == _keys(ConversionsSnapshot)
    assert set(conversions["transcription_model"]) == _keys(ModelSnapshot)
    assert set(conversions["description_model"]) == chat_keys
    echo, http = snapshot_tool(snapshot, "test-echo"), snapshot_tool(snapshot, "lookup-order")
    assert set(echo) == ToolSpec.__required_keys__
    assert set(http) == ToolSpec.__required_keys__ | {"http"}
    assert set(http["approval"]) == _keys(ToolApproval) and set(http["http"]) == _keys(ToolHttp)
    assert "api_key" not in snapshot["model"]
    assert snapshot_models(snapshot) == [snapshot["model"], snapshot["fallback_model"]]
    assert snapshot_tool(snapshot, "not-listed") is None


@pytest.mark.django_db
def test_an_unchanged_configuration_pins_the_same_version_and_a_change_a_new_one():
    agent = make_agent(tools=["test-echo"], run_cost_budget="1.5")
    first = agent_version_current(agent=agent)
    assert first.config_hash == snapshot_hash(first.snapshot)

    # The same amounts spelled otherwise (a form's "1.50", the database's 1.500000) are the same configuration.
    Agent.objects.filter(pk=agent.pk).update(run_cost_budget="1.50")
    ModelConfig.objects.filter(pk=agent.model_config_id).update(price_input_per_million="1.000000")
    agent.refresh_from_db()
    assert agent_version_current(agent=agent) == first

    Agent.objects.filter(pk=agent.pk).update(max_iterations=agent.max_iterations + 1)
    agent.refresh_from_db()
    second = agent_version_current(agent=agent)
    assert second.number == first.number + 1 and second.config_hash != first.config_hash
    second.refresh_from_db()
    assert snapshot_parse(second.snapshot)["agent"]["max_iterations"] == agent.max_iterations


@pytest.mark.django_db
def test_an_agent_level_description_replaces_the_tools_for_that_agent_only():
    agent, other = make_agent(slug="one", tools=["test-echo"]), make_agent(slug="two", tools=["test-echo"])
    shared = ToolDefinition.objects.get(name="test-echo").description
    unchanged = agent_version_current(agent=agent)
    AgentTool.objects.filter(agent=agent).update(description_override="Repeats words.")

    assert snapshot_tool(snapshot_build(agent=agent), "test-echo")["description"] == "Repeats words."
    assert snapshot_tool(snapshot_build(agent=other), "test-echo")["description"] == shared
    # The model is told something else: a new version; undone, the configuration of before.
    assert agent_version_current(agent=agent) != unchanged
    AgentTool.objects.filter(agent=agent).update(description_override="")
    assert agent_version_current(agent=agent).config_hash == unchanged.config_hash
