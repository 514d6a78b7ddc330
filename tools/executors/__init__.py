"""Run one tool call and turn whatever happens into a ToolOutcome.

`execute_tool` is the engine's single entry; each kind of tool has a small executor module.
Its `load(spec)` reads what the call needs from the database (credentials, server settings:
snapshots hold no secrets) on the caller's thread; its `run(...)` does the call on a pool
thread, which opens no database connection, and returns the tool's value or raises ToolError
(a knowledge base's search, registered by the knowledge app, is the exception: it reads chunks
and writes its ledger row there, and closes that thread's connection when done).
A kind whose code lives in an app above tools is plugged in by that app's `AppConfig.ready()`
through `executor_register`, so the import contract sees the dependency and a process that
loads the app always has the kind.
The engine never sees an exception from a tool: failures become a short, friendly text the model
can correct from (seed 003 §2.4), while a traceback, where there is one, stays on the ledger row.
"""

import logging
import traceback
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured

from platform_site import green
from tools.executors import a2a, http, mcp, python
from tools.executors.sandbox import SandboxCrash
from tools.registry import HandOff, ToolContext, ToolError
from tools.results import render, trim_text

log = logging.getLogger(__name__)


class Executor(Protocol):
    """What runs the tools of one kind (a module with these two functions serves)."""

    def load(self, spec: dict, live: dict | None = None) -> Any: ...

    def run(self, *, spec: dict, arguments: dict, ctx: ToolContext, loaded: Any) -> Any: ...


_EXECUTORS: dict[str, Executor] = {"python": python, "http": http, "mcp": mcp, "a2a": a2a}


def executor_register(*, kind: str, executor: Executor) -> None:
    """Run the tools of `kind` with `executor`; called from the providing app's ready().

    Registering the same executor again is a no-op (ready() may run more than once in a process,
    as in tests). A second executor for a kind that has one is a configuration error raised at
    start-up: which of the two would run the kind's tools is not this module's to guess."""
    if not callable(getattr(executor, "load", None)) or not callable(getattr(executor, "run", None)):
        raise ImproperlyConfigured(f"The executor of tool kind {kind!r} needs load() and run().")
    registered = _EXECUTORS.setdefault(kind, executor)
    if registered is not executor:
        raise ImproperlyConfigured(f"Tool kind {kind!r} has an executor already: {registered!r}.")


def executor_of(kind: str) -> Executor | None:
    """The executor of `kind`, built in or registered; None for a kind nothing runs."""
    return _EXECUTORS.get(kind)


# Timeouts need the call off the caller's thread. A timed-out call cannot be killed, so its
# thread runs on; the pool bounds how many such stragglers can pile up, and a call that times
# out still queued behind them never starts. Sandboxed python tools are the exception: their
# child process is killed at the same timeout. Code a worker's engine loop carries
# (platform_site.green) waits for the call on the loop, which carries its other runs
# meanwhile; anywhere else the caller's thread waits.
_pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="tool")


@dataclass
class ToolOutcome:
    status: str  # "succeeded", "error", or "handoff" (the engine asks a person for the result)
    content: str
    truncated: bool = False
    error: str = ""
    # With "handoff": what the person is asked; `content` is then the result if nobody answers.
    question: str = ""


def execute_tool(*, spec: dict, arguments: dict, ctx: ToolContext, live: dict | None = None) -> ToolOutcome:
    """`live`: the tool row's `is_active`, when the caller read it just before (the engine reads
    it with the statement that marks the call running); a python tool then needs no read here."""
    name, limit = spec["name"], int(spec.get("max_result_chars", 8000))
    executor = executor_of(spec.get("kind", "python"))
    if executor is None:
        return ToolOutcome(
            "error", f"Tool {name} cannot run: unsupported kind {spec.get('kind')!r}.", error=f"kind {spec.get('kind')}"
        )
    try:
        loaded = executor.load(spec, live)
    except ToolError as exc:
        return ToolOutcome("error", f"Tool {name} cannot run: {exc}", error=exc.detail)
    future = _pool.submit(executor.run, spec=spec, arguments=arguments, ctx=ctx, loaded=loaded)
    try:
        value = green.wait(future, timeout=spec.get("timeout_seconds", 30))
    except FutureTimeout:
        # A call still queued behind busy pool threads is dropped here: started later, a write
        # tool would take effect after its run recorded the call as timed out. One already
        # running cannot be stopped; its row says so.
        never_started = future.cancel()
        return ToolOutcome(
            "error",
            f"Tool {name} timed out after {spec.get('timeout_seconds')} s; try again later or answer without it.",
            error="timeout before it started (every tool thread was busy)" if never_started else "timeout",
        )
    except ToolError as exc:
        return ToolOutcome("error", trim_text(f"Tool {name} failed: {exc}", limit).text, error=exc.detail)
    except HandOff as exc:
        return ToolOutcome("handoff", trim_text(exc.unanswered, limit).text, question=exc.question)
    except SandboxCrash as exc:
        log.warning("tool %s failed in its sandbox: %s", name, exc)
        return ToolOutcome(
            "error", trim_text(f"Tool {name} failed: {str(exc).splitlines()[0]}", limit).text, error=str(exc)
        )
    except Exception as exc:  # a tool's failure is data for the model, not a crash of the run
        log.warning("tool %s failed", name, exc_info=True)
        return ToolOutcome("error", trim_text(f"Tool {name} failed: {exc}", limit).text, error=traceback.format_exc())
    rendered = render(value, limit)
    return ToolOutcome("succeeded", rendered.text, rendered.truncated)
