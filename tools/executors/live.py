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
    if row is None:
        raise ToolError("it has been removed by an operator; answer without it.")
    if not row["is_active"]:
        raise ToolError("it has been switched off by an operator; answer without it.")
    return row
