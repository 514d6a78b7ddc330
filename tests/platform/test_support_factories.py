"""The suite's factories make the rows production makes: an agent's tool definitions, written in one
statement by tests.support.factories, are the rows tools.services' registry sync writes."""

import pytest
from django.forms.models import model_to_dict

from tests.support.factories import registered_tools_synced
from tools.models import ToolDefinition
from tools.registry import registry
from tools.services import tool_definitions_sync_from_registry

pytestmark = pytest.mark.django_db


def _rows() -> dict:
    return {
        tool.name: {k: v for k, v in model_to_dict(tool).items() if k != "id"} for tool in ToolDefinition.objects.all()
    }


def test_the_factories_tool_definitions_are_the_syncs():
    registered_tools_synced()
    made = _rows()
    ToolDefinition.objects.all().delete()
    tool_definitions_sync_from_registry()
    assert made == _rows()
    assert set(made) == set(registry.names())


def test_a_missing_tool_definition_is_synced_again():
    registered_tools_synced()
    ToolDefinition.objects.filter(name="test-echo").delete()
    registered_tools_synced()
    assert ToolDefinition.objects.get(name="test-echo").description == registry.get("test-echo").description
