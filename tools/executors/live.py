"""The live state of a tool at the moment it is called.

A run's snapshot pins a tool's definition, so that a run does not change under it; switching a
tool or its MCP server off must still stop it at once, in every run, including runs pinned to
an older version and calls approved before the switch. Executors read this row on the
caller's thread, just before the call.
"""

from tools.models import ToolDefinition
from tools.registry import ToolError


def live_tool(spec: dict, *fields: str) -> dict:
    """The named fields of the tool's row, or ToolError when it was removed or switched off."""
    row = ToolDefinition.objects.filter(pk=spec["id"]).values("is_active", *fields).first()
    live_check(None if row is None else row["is_active"])
    return row


def live_check(is_active: bool | None) -> None:
    """ToolError unless the tool's row, read as `is_active` (None: there is no row), lets it run.
    The engine reads it in the statement that marks the call running, just before the call."""
    if is_active is None:
        raise ToolError("it has been removed by an operator; answer without it.")
    if not is_active:
        raise ToolError("it has been switched off by an operator; answer without it.")
