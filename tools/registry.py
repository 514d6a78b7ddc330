"""Registry of python tools, filled by the @python_tool decorator.

The modules listed in settings.AGENTRY_TOOL_MODULES are imported at start-up; a
ToolDefinition of kind python names one of these callables.
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings


class ToolError(Exception):
    """A failure the model should read as it is: the message says what went wrong and, where
    it can, what to do instead. Any other exception is reported with its traceback on the ledger.

    `detail`, when given, is what the operator reads on the ledger instead of the message: facts
    the model should not see, such as the address a refused host resolved to."""

    def __init__(self, message: str, *, detail: str = ""):
        super().__init__(message)
        self.detail = detail or message


class HandOff(Exception):
    """The tool ran but cannot give a result: a person should write it (a knowledge base set to
    hand off when nothing is found). `question` is what the person is shown; `unanswered` is the
    result the model reads if nobody answers."""

    def __init__(self, question: str, *, unanswered: str):
        super().__init__(question)
        self.question = question
        self.unanswered = unanswered


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the call it serves."""

    run_id: str
    tool_call_id: str
    idempotency_key: str
    # Given by the engine for a call of a run, callable from the tool's thread: `report` records
    # what a long call learns (a remote task's id and state) on the invocation, with an event;
    # `cancelled` says whether the run was asked to stop since the call began.
    report: Callable[[dict], None] | None = None
    cancelled: Callable[[], bool] | None = None


@dataclass(frozen=True)
class PythonTool:
    name: str
    description: str
    parameters: dict
    func: Callable[..., object]
    side_effect: str = "read"
    # "auto" asks for approval of write tools only; see tools/approval_policy.py.
    approval_policy: str = "auto"
    idempotent: bool = False
    timeout_seconds: float = 30
    max_result_chars: int = 8000
    tags: tuple = field(default_factory=tuple)
    # Run in a child process under CPU-time and memory limits, killed at the timeout
    # (tools/executors/sandbox.py): for tools whose cost depends on what the model sends.
    sandboxed: bool = False


class ToolRegistry:
    def __init__(self):
        self._tools: dict[str, PythonTool] = {}

    def register(self, tool: PythonTool) -> None:
        existing = self._tools.get(tool.name)
        if existing is not None and existing.func is not tool.func:
            raise ValueError(f"python tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool

    def get(self, name: str) -> PythonTool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def all(self) -> list[PythonTool]:
        return [self._tools[name] for name in self.names()]

    def load_modules(self) -> None:
        for module in settings.AGENTRY_TOOL_MODULES:
            importlib.import_module(module)


registry = ToolRegistry()


def python_tool(*, name: str, description: str, parameters: dict, **options):
    """Register the decorated function as a tool. It receives the validated arguments as
    keyword arguments plus `ctx` (a ToolContext) and returns the text the model will read, or a
    JSON-able value (trimmed by rows when too long); it raises ToolError for a friendly failure."""

    def decorator(func):
        registry.register(PythonTool(name=name, description=description, parameters=parameters, func=func, **options))
        return func

    return decorator
