"""MCP tools: a tool of a registered MCP server, called over a pooled session."""

import json

from mcp import MCPError
from mcp_types import CallToolResult

from tools.executors.live import live_tool
from tools.mcp_sessions import MCPUnavailable, ServerConfig, pool
from tools.models import MCPServer
from tools.registry import ToolContext, ToolError


def load(spec: dict, live: dict | None = None) -> ServerConfig:
    # The server's row is read here anyway; the tool's is read with it, whatever `live` says.
    live_tool(spec)
    server = MCPServer.objects.filter(pk=spec["mcp"]["server_id"], is_active=True).first()
    if server is None:
        raise ToolError("its MCP server has been removed or switched off.")
    return ServerConfig.from_server(server)


def _content_text(result: CallToolResult) -> str:
    parts = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:
            mime = getattr(block, "mime_type", None) or getattr(getattr(block, "resource", None), "mime_type", None)
            parts.append(f"[{kind or 'content'} omitted{': ' + mime if mime else ''}]")
    return "\n".join(parts)


def tool_value(result: CallToolResult):
    """Structured content when the server sent it, else its text (parsed when it is JSON, so a
    long list can be trimmed by rows)."""
    if result.is_error:
        raise ToolError(_content_text(result) or "the server reported an error without details.")
    if result.structured_content is not None:
        return result.structured_content
    text = _content_text(result)
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def run(*, spec: dict, arguments: dict, ctx: ToolContext, loaded: ServerConfig):
    rerunnable = spec["side_effect"] == "read" or spec["idempotent"]
    try:
        result = pool.call_tool(
            loaded, spec["mcp"]["tool_name"], arguments, timeout=spec["timeout_seconds"], rerunnable=rerunnable
        )
    except TimeoutError:
        raise ToolError(f"the MCP server did not answer within {spec['timeout_seconds']} s.")
    except MCPUnavailable as exc:
        raise ToolError(str(exc))
    except MCPError as exc:
        raise ToolError(f"the MCP server refused the call: {exc}")
    return tool_value(result)
