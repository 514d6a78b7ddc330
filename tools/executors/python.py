"""Python tools: a callable from the registry, called with the validated arguments.

Tools registered with sandboxed=True run in a child process that is killed at the timeout
(tools/executors/sandbox.py); the others run on the calling thread."""

from tools.executors.live import live_check, live_tool
from tools.executors.sandbox import run_sandboxed, warm_up
from tools.registry import ToolContext, ToolError, registry


def load(spec: dict, live: dict | None = None) -> None:
    # A spec without an id is a registry tool called directly, with no row to switch off.
    if spec.get("id") is not None:
        if live is None:
            live_tool(spec)
        else:
            live_check(live["is_active"])
    tool = registry.get(spec.get("python_callable") or spec["name"])
    if tool is not None and tool.sandboxed:
        warm_up()


def run(*, spec: dict, arguments: dict, ctx: ToolContext, loaded: None):
    target = spec.get("python_callable") or spec["name"]
    tool = registry.get(target)
    if tool is None:
        raise ToolError("it is not available right now (not registered in this worker).")
    if tool.sandboxed:
        return run_sandboxed(
            tool, arguments=arguments, ctx=ctx, timeout_seconds=float(spec.get("timeout_seconds", tool.timeout_seconds))
        )
    return tool.func(ctx=ctx, **arguments)
