"""Approval policy: defaults by side effect, per-agent overrides, and rules on the arguments."""

import pytest
from django.core.exceptions import ValidationError

from agents.models import AgentTool
from agents.snapshot import snapshot_build
from tests.support.factories import make_agent
from tools.models import ToolDefinition
from tools.services import tool_definitions_sync_from_registry


def _policy_of(agent, tool_name: str) -> dict:
    return next(t for t in snapshot_build(agent=agent)["tools"] if t["name"] == tool_name)["approval"]


def test_write_tools_ask_by_default_and_read_tools_do_not(db):
    agent = make_agent(tools=["test-counter", "test-echo"])
    assert ToolDefinition.objects.get(name="test-counter").approval_policy == "auto"
    assert _policy_of(agent, "test-counter")["policy"] == "always"
    assert _policy_of(agent, "test-echo")["policy"] == "never"
    assert _policy_of(agent, "test-counter")["timeout_seconds"] == 86400


def test_agents_override_the_tool_policy(db):
    agent = make_agent(tools=["test-counter", "test-echo"], approval={"test-counter": "never", "test-echo": "always"})
    assert _policy_of(agent, "test-counter")["policy"] == "never"
    assert _policy_of(agent, "test-echo")["policy"] == "always"
    AgentTool.objects.filter(agent=agent, tool__name="test-echo").update(approval="rule", approval_rule="times > 3")
    assert _policy_of(agent, "test-echo") == {
        "policy": "rule",
        "rule": "times > 3",
        "timeout_seconds": 86400,
        "on_expiry": "continue",
    }


def test_tool_rule_applies_unless_the_agent_overrides_it(db):
    agent = make_agent(tools=["test-echo"])
    ToolDefinition.objects.filter(name="test-echo").update(approval_policy="rule", approval_rule='text == "rm"')
    assert _policy_of(agent, "test-echo")["rule"] == 'text == "rm"'


def test_admin_validation_of_rules(db):
    tool_definitions_sync_from_registry()
    tool = ToolDefinition.objects.get(name="test-echo")
    tool.approval_policy, tool.approval_rule = "rule", "lenght(text) > 3"
    with pytest.raises(ValidationError) as error:
        tool.full_clean()
    assert "approval_rule" in error.value.message_dict
    agent = make_agent(tools=["test-echo"])
    link = AgentTool.objects.get(agent=agent)
    link.approval, link.approval_rule = "rule", "txt > 1"
    with pytest.raises(ValidationError, match="unknown name"):
        link.full_clean()
    link.approval_rule = "times > 1"
    link.full_clean()


def test_syncing_the_registry_keeps_the_operators_policy(db):
    tool_definitions_sync_from_registry()
    ToolDefinition.objects.filter(name="test-counter").update(approval_policy="never")
    tool_definitions_sync_from_registry()
    assert ToolDefinition.objects.get(name="test-counter").approval_policy == "never"
