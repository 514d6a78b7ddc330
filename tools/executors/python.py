"""Python tools: a callable from the registry, called with the validated arguments."""

from tools.registry import ToolContext, ToolError, registry


def load(spec: dict) -> None:
    return None


def run(*, spec: dict, arguments: dict, ctx: ToolContext, loaded: None):
    target = spec.get("python_callable") or spec["name"]
    tool = registry.get(target)
    if tool is None:
        raise ToolError("it is not available right now (not registered in this worker).")
    return tool.func(ctx=ctx, **arguments)
