"""Writes on tool definitions."""

from tools.models import ToolDefinition
from tools.registry import registry


def tool_definitions_sync_from_registry() -> tuple[int, int]:
    """Create or update one python ToolDefinition per registered tool. Returns (created, updated)."""
    created = updated = 0
    for tool in registry.all():
        fields = {
            "description": tool.description, "parameters": tool.parameters,
            "kind": ToolDefinition.Kind.PYTHON, "python_callable": tool.name,
            "side_effect": tool.side_effect, "idempotent": tool.idempotent,
            "timeout_seconds": tool.timeout_seconds, "max_result_chars": tool.max_result_chars,
        }
        _, was_created = ToolDefinition.objects.update_or_create(
            name=tool.name, defaults=fields,
            # The approval policy is the operator's to change: a sync sets it on creation only.
            create_defaults={**fields, "approval_policy": tool.approval_policy},
        )
        created += was_created
        updated += not was_created
    return created, updated
