"""The built-in tools that reach nothing outside the process (the time); the calculator and the
guarded URL fetch are in tests/tools/test_builtin_tools.py."""

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


def test_current_time_in_a_time_zone():
    outcome = call("current_time", time_zone="Asia/Shanghai")
    assert outcome.status == "succeeded"
    assert '"utc_offset":"+08:00"' in outcome.content and '"time_zone":"Asia/Shanghai"' in outcome.content
    unknown = call("current_time", time_zone="Mars/Olympus")
    assert unknown.status == "error" and "IANA name" in unknown.content
