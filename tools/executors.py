"""Run one tool call and turn whatever happens into a ToolOutcome.

The engine never sees an exception from a tool: failures become a short, friendly text the
model can correct from (seed 003 §2.4), while the traceback stays on the ledger row.
"""

import logging
import traceback
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from tools.registry import ToolContext, registry

log = logging.getLogger(__name__)

# Timeouts need the call off the worker's own thread. A timed-out call cannot be killed, so
# its thread runs on; the pool bounds how many such stragglers can pile up.
_pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="tool")


@dataclass
class ToolOutcome:
    status: str  # "succeeded" or "error"
    content: str
    truncated: bool = False
    error: str = ""


def trim_result(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    omitted = len(text) - limit
    return f"{text[:limit]}\n… [{omitted} more characters omitted]", True


def execute_tool(*, spec: dict, arguments: dict, ctx: ToolContext) -> ToolOutcome:
    kind = spec.get("kind", "python")
    if kind != "python":
        return ToolOutcome("error", f"Tool {spec['name']} cannot run: unsupported kind {kind!r}.", error=f"kind {kind}")
    target = spec.get("python_callable") or spec["name"]
    tool = registry.get(target)
    if tool is None:
        return ToolOutcome("error", f"Tool {spec['name']} is not available right now.", error=f"unregistered {target}")
    future = _pool.submit(tool.func, ctx=ctx, **arguments)
    try:
        value = future.result(timeout=spec.get("timeout_seconds", 30))
    except FutureTimeout:
        return ToolOutcome("error", f"Tool {spec['name']} timed out after {spec.get('timeout_seconds')} s; try again later or answer without it.", error="timeout")
    except Exception as exc:  # a tool's failure is data for the model, not a crash of the run
        log.warning("tool %s failed", spec["name"], exc_info=True)
        return ToolOutcome("error", f"Tool {spec['name']} failed: {exc}", error=traceback.format_exc())
    text = value if isinstance(value, str) else str(value)
    text, truncated = trim_result(text, int(spec.get("max_result_chars", 8000)))
    return ToolOutcome("succeeded", text, truncated)
