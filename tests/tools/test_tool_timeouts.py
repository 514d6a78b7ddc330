"""A tool call that times out while it waits for a free tool thread never starts later."""

import threading
from concurrent.futures import ThreadPoolExecutor

import tools.executors
from tools.executors import execute_tool
from tools.registry import ToolContext

CTX = ToolContext(run_id="run", tool_call_id="call_1", idempotency_key="run:call_1")


def _counter_spec(timeout_seconds: float) -> dict:
    return {
        "name": "test-counter",
        "kind": "python",
        "python_callable": "test-counter",
        "timeout_seconds": timeout_seconds,
    }


def test_a_call_that_times_out_queued_behind_busy_threads_never_runs(monkeypatch, executions):
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tool")
    monkeypatch.setattr(tools.executors, "_pool", pool)
    release = threading.Event()
    straggler = pool.submit(release.wait, 30)  # an earlier call that outlived its own timeout
    try:
        outcome = execute_tool(spec=_counter_spec(0.3), arguments={"label": "queued"}, ctx=CTX)
    finally:
        release.set()
    assert straggler.result(timeout=5)
    pool.shutdown(wait=True)  # whatever was still queued has had its chance to run

    assert executions("queued") == 0
    assert outcome.status == "error" and outcome.content.startswith("Tool test-counter timed out after 0.3 s")
    assert outcome.error == "timeout before it started (every tool thread was busy)"

    # The same call with a free thread runs, once: the witness above would have seen it.
    monkeypatch.setattr(tools.executors, "_pool", ThreadPoolExecutor(max_workers=1, thread_name_prefix="tool"))
    assert execute_tool(spec=_counter_spec(5), arguments={"label": "queued"}, ctx=CTX).status == "succeeded"
    assert executions("queued") == 1
