"""Built-in python tools cannot hold a worker: the calculator bounds every operation that can
grow without limit, and sandboxed tools run in a child process that is killed at its timeout
or when it passes its memory limit."""

import os

import pytest

from tests.support.tool_fixtures import SANDBOX_PID_KEY, redis_client
from tests.support.waits import wait_for
from tools.executors import execute_tool
from tools.registry import ToolContext, registry

CTX = ToolContext(run_id="run", tool_call_id="call_1", idempotency_key="run:call_1")


def call(name: str, **arguments):
    tool = registry.get(name)
    spec = {
        "name": name,
        "kind": "python",
        "python_callable": name,
        "timeout_seconds": tool.timeout_seconds,
        "max_result_chars": tool.max_result_chars,
    }
    return execute_tool(spec=spec, arguments=arguments, ctx=CTX)


@pytest.mark.parametrize("expression", ["round(1, -10**7)", "round(7, 10**9)", "round(2.5, -1001)", "round(1, 0.5)"])
def test_round_refuses_digit_counts_that_hide_a_huge_power(expression):
    outcome = call("calculator", expression=expression)
    assert outcome.status == "error"
    assert "round() takes a whole number of digits between -1000 and 1000" in outcome.content


def test_round_within_bounds_still_works():
    outcome = call("calculator", expression="round(123456, -3)")
    assert outcome.status == "succeeded" and outcome.content.endswith('"result":123000}')


@pytest.mark.parametrize(
    "expression,message",
    [
        ("1 << 10**7", "operator this calculator does not offer"),
        ("2 >> 1", "operator this calculator does not offer"),
        ("'ab' * 10**9", "Only numbers"),
        ("(10**999) * (10**999) * (10**999)", "too large"),
        ("max(10**999, 1) * 10**999", "too large"),
        ("factorial(10**6)", "Function 'factorial' not defined"),
        ("int('9' * 10**6)", "Function 'int' not defined"),
        ("-" * 499 + "1", "nested too deeply"),
    ],
)
def test_operations_that_could_grow_without_limit_are_refused(expression, message):
    outcome = call("calculator", expression=expression)
    assert outcome.status == "error" and message in outcome.content


def test_the_calculator_runs_sandboxed():
    assert registry.get("calculator").sandboxed


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_sandboxed_tool_that_spins_is_killed_at_its_timeout():
    client = redis_client()
    client.delete(SANDBOX_PID_KEY)
    outcome = call("test-hog", resource="cpu")
    assert outcome.status == "error"
    # The pool's wait and the sandbox's own poll both end at the timeout: either may say so first.
    assert outcome.content.startswith(
        ("Tool test-hog timed out after 2", "Tool test-hog failed: it did not finish within 2 s")
    )
    pid = int(client.get(SANDBOX_PID_KEY))
    assert pid != os.getpid()
    wait_for(lambda: _gone(pid), timeout=10, message="the sandboxed process to be killed")


def test_a_sandboxed_tool_that_hoards_memory_is_stopped():
    outcome = call("test-hog", resource="memory")
    assert outcome.status == "error"
    assert "needed more CPU time or memory than it is allowed and was stopped" in outcome.content
