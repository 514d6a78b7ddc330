"""Running a python tool in a child process that can be killed.

A python tool runs on a thread of the worker, and a thread cannot be stopped: a call that
spins inside C code (a huge integer, a regular expression, a runaway loop) holds the GIL and
starves every run the worker serves until it ends on its own. A tool registered with
`sandboxed=True` runs instead in a child process with CPU-time and address-space limits
(setrlimit), killed when its timeout passes; the model gets a tool error either way.

Children come from multiprocessing's fork server: a single-threaded process started once,
with Django and the tool modules already imported (tools.sandbox_preload), so a call
costs one fork rather than a new interpreter, and no child inherits a lock that one of the
worker's other threads happened to hold when it forked.
"""

import dataclasses
import importlib
import math
import multiprocessing
import resource
import threading
import traceback

from django.conf import settings

from platform_site import green
from tools.registry import PythonTool, ToolContext, ToolError, registry

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(["tools.sandbox_preload"])


_warm = threading.Event()
_warm_lock = threading.Lock()


def _nothing() -> None:
    return None


def warm_up() -> None:
    """Start the fork server and wait until it serves, once per process. Its start (Django and
    the tool modules imported) takes a while, and must not count against the first call's timeout.
    On a worker's engine loop the wait is a thread's, so the loop carries its other runs meanwhile."""
    if not _warm.is_set():
        green.offload(_start)


def _start() -> None:
    with _warm_lock:
        if not _warm.is_set():
            process = _context.Process(target=_nothing, daemon=True)
            process.start()
            process.join()
            _warm.set()


class SandboxCrash(Exception):
    """The tool raised something other than ToolError in its child; carries the child's traceback."""


def _limit(kind: int, soft: int, hard: int) -> None:
    _, current_hard = resource.getrlimit(kind)
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(kind, (soft, hard))


def _address_space() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def child_limits_apply(*, cpu_seconds: int, memory_bytes: int) -> None:
    """Limit this (child) process: `memory_bytes` of address space on top of what it maps now
    (the fork server's imports, what it was handed), so the allowance means the same whatever the
    process already maps; `cpu_seconds` of CPU, past which the kernel sends SIGXCPU, which ends
    the process (the hard limit, a second later, is a SIGKILL). Knowledge documents are read
    under the same limits (knowledge.parsing)."""
    start = _address_space()
    _limit(resource.RLIMIT_AS, start + memory_bytes, start + memory_bytes)
    _limit(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)


def _child(conn, module: str, name: str, arguments: dict, ctx: ToolContext, cpu_seconds: int, memory_bytes: int):
    child_limits_apply(cpu_seconds=cpu_seconds, memory_bytes=memory_bytes)
    try:
        importlib.import_module(module)
        value = registry.get(name).func(ctx=ctx, **arguments)
        conn.send(("ok", value, ""))
    except ToolError as exc:
        conn.send(("tool_error", str(exc), exc.detail))
    except MemoryError:
        conn.send(("limit", "memory", ""))
    except BaseException as exc:  # reported to the parent, which decides what the model reads
        conn.send(("crash", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    finally:
        conn.close()


def run_sandboxed(tool: PythonTool, *, arguments: dict, ctx: ToolContext, timeout_seconds: float):
    """The tool's value, computed in a child process. Raises ToolError when the tool does, when it
    runs out of time or exceeds its limits, and SandboxCrash for any other failure."""
    cpu_seconds = max(1, math.ceil(timeout_seconds))
    memory_bytes = settings.AGENTRY_SANDBOX_MEMORY_MB * 1024 * 1024
    receiver, sender = _context.Pipe(duplex=False)
    # The child gets a pickled copy of the context: the engine's callbacks stay here.
    plain = dataclasses.replace(ctx, report=None, cancelled=None)
    process = _context.Process(
        target=_child,
        args=(sender, tool.func.__module__, tool.name, arguments, plain, cpu_seconds, memory_bytes),
        daemon=True,
    )
    process.start()
    sender.close()
    try:
        if not receiver.poll(timeout_seconds):
            raise ToolError(
                f"it did not finish within {timeout_seconds:g} s and was stopped; "
                "simplify the request or answer without it.",
                detail="timeout: child process killed",
            )
        try:
            outcome, value, detail = receiver.recv()
        except EOFError:
            outcome, value, detail = "limit", "", ""
    finally:
        receiver.close()
        if process.is_alive():
            process.kill()
        process.join()
    if outcome == "ok":
        return value
    if outcome == "tool_error":
        raise ToolError(value, detail=detail)
    if outcome == "limit":
        raise ToolError(
            "it needed more CPU time or memory than it is allowed and was stopped; simplify the request.",
            detail=f"child process ended by its limits (exit code {process.exitcode})",
        )
    raise SandboxCrash(f"{value}\n{detail}")
