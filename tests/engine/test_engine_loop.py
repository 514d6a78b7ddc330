"""The loop's decisions, driven in-process against the fake model over real HTTP."""

import pytest

from agents.models import AgentTool
from conversations.models import Approval, LLMCall, Message, ToolInvocation
from engine.runs import run_cancel
from tests.support.runs import advance, last_answer, start_run

pytestmark = pytest.mark.django_db


def call(name, arguments):
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def script(*steps):
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def test_max_iterations_ends_with_an_explanation(scripted_agent):
    agent = scripted_agent(
        script(call("test-echo", {"text": "a"})), tools=["test-echo"], max_iterations=2, max_same_tool_streak=10
    )
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("completed", "max_iterations")
    assert LLMCall.objects.filter(run=run).count() == 2
    assert ToolInvocation.objects.filter(run=run, status="succeeded").count() == 2
    assert "more than 2 model steps" in last_answer(run)


def test_same_tool_streak_is_refused_with_a_hint_then_stopped(scripted_agent, fake_llm):
    agent = scripted_agent(
        script(call("test-echo", {"text": "again"})), tools=["test-echo"], max_iterations=20, max_same_tool_streak=3
    )
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("completed", "tool_loop")
    statuses = list(ToolInvocation.objects.filter(run=run).order_by("created_at").values_list("status", flat=True))
    assert statuses == ["succeeded"] * 3 + ["blocked", "blocked"]
    # The fourth call was not run; the model read the hint as the tool result.
    hint = Message.objects.filter(run=run, role="tool").order_by("order")[3].content
    assert "called 4 times in a row" in hint
    assert "test-echo" in last_answer(run)
    assert LLMCall.objects.filter(run=run).count() == 5


def test_invalid_arguments_are_told_to_the_model_which_corrects_them(scripted_agent, fake_llm):
    agent = scripted_agent(
        script(
            call("test-echo", {"txt": "hi"}),
            {
                "branches": [
                    {
                        "if_last_tool_result_matches": "accepts only: text, times",
                        "then": call("test-echo", {"text": "hi"}),
                    }
                ],
                "else": {"content": "gave up"},
            },
            {"content": "done: {last_tool_result}"},
        ),
        tools=["test-echo"],
    )
    run = advance(start_run(agent))

    first, second = ToolInvocation.objects.filter(run=run).order_by("created_at")
    assert first.status == "error" and first.validation_errors
    assert "'text' is a required property" in first.result
    assert second.status == "succeeded" and second.result == "hi"
    assert last_answer(run) == "done: hi"


def test_unknown_tool_and_tolerant_parsing(scripted_agent):
    agent = scripted_agent(
        script(
            call("no-such-tool", {}),
            call("test-echo", 'Sure! {"text": "ok", "times": 2} hope that helps'),
            {"content": "finished"},
        ),
        tools=["test-echo"],
    )
    run = advance(start_run(agent))

    unknown, echo = ToolInvocation.objects.filter(run=run).order_by("created_at")
    assert unknown.status == "error" and "Available tools: test-echo" in unknown.result
    assert unknown.tool is None
    assert echo.status == "succeeded" and echo.arguments == {"text": "ok", "times": 2} and echo.result == "okok"
    assert run.stop_reason == "final_answer"


def test_tool_that_is_not_the_agents_is_never_run(scripted_agent, executions):
    # test-counter is registered, but this agent does not list it.
    agent = scripted_agent(script(call("test-counter", {"label": "not-mine"}), {"content": "ok"}), tools=["test-echo"])
    run = advance(start_run(agent))

    [invocation] = ToolInvocation.objects.filter(run=run)
    assert invocation.status == "error" and "no tool named 'test-counter'" in invocation.result
    assert executions("not-mine") == 0


def test_failing_tool_becomes_a_friendly_error(scripted_agent):
    agent = scripted_agent(script(call("test-fail", {}), {"content": "sorry: {last_tool_result}"}), tools=["test-fail"])
    run = advance(start_run(agent))

    [invocation] = ToolInvocation.objects.filter(run=run)
    assert invocation.status == "error" and "Traceback" in invocation.error
    assert last_answer(run) == "sorry: Tool test-fail failed: backend unavailable"
    assert run.status == "completed"


def test_long_result_is_trimmed_and_says_so(scripted_agent):
    from tools.models import ToolDefinition

    agent = scripted_agent(
        script(call("test-echo", {"text": "x", "times": 500}), {"content": "ok"}), tools=["test-echo"]
    )
    ToolDefinition.objects.filter(name="test-echo").update(max_result_chars=100)
    run = advance(start_run(agent))

    [invocation] = ToolInvocation.objects.filter(run=run)
    assert invocation.truncated and invocation.result.endswith("[400 more characters omitted]")


def test_write_tool_parks_the_run_without_running(scripted_agent, executions):
    agent = scripted_agent(script(call("test-counter", {"label": "parked"}), {"content": "ok"}), tools=["test-counter"])
    AgentTool.objects.filter(agent=agent).update(approval=AgentTool.Approval.ALWAYS)
    run = advance(start_run(agent))

    assert run.status == "awaiting_approval" and run.lease_owner == "" and run.lease_expires_at is None
    [approval] = Approval.objects.filter(run=run)
    assert approval.status == "pending" and approval.arguments == {"label": "parked"}
    assert ToolInvocation.objects.get(run=run).status == "awaiting_approval"
    assert executions("parked") == 0

    run = run_cancel(run=run)
    approval.refresh_from_db()
    assert (run.status, approval.status) == ("cancelled", "cancelled")


def test_dead_approval_does_not_block_the_next_message(scripted_agent, fake_llm):
    agent = scripted_agent(
        {
            "scenarios": [
                {"match": "write", "steps": [call("test-counter", {"label": "dead"})]},
                {"match": "hello", "steps": [{"content": "hi there"}]},
            ]
        },
        tools=["test-counter"],
    )
    AgentTool.objects.filter(agent=agent).update(approval=AgentTool.Approval.ALWAYS)
    parked = advance(start_run(agent, "please write"))
    run_cancel(run=parked)

    run = advance(start_run(agent, "hello", conversation=parked.conversation))
    assert run.status == "completed" and last_answer(run) == "hi there"
    # The unanswered tool call of the cancelled run is left out of the context.
    sent = LLMCall.objects.get(run=run).request["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"]


def test_provider_500_is_retried_as_a_new_attempt(scripted_agent):
    agent = scripted_agent(script({"content": "fine", "fault": {"status": 500, "times": 1}}))
    run = advance(start_run(agent))

    attempts = list(LLMCall.objects.filter(run=run).order_by("attempt").values_list("attempt", "status", "http_status"))
    assert attempts == [(1, "failed", 500), (2, "succeeded", 200)]
    assert run.status == "completed"


def test_provider_4xx_is_not_retried_and_fails_the_run_readably(scripted_agent):
    agent = scripted_agent(script({"content": "never", "fault": {"status": 400}}))
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert LLMCall.objects.filter(run=run).count() == 1
    assert "HTTP 400" in run.error


def test_unreachable_model_exhausts_retries_then_fails(scripted_agent):
    agent = scripted_agent(
        script({"content": "x"}), model_fields={"base_url": "http://127.0.0.1:9/v1", "max_retries": 2}
    )
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert list(LLMCall.objects.filter(run=run).values_list("status", flat=True)) == ["failed"] * 3


def test_request_carries_the_model_parameters_and_tools(scripted_agent, fake_llm):
    agent = scripted_agent(
        script({"content": "ok"}),
        tools=["test-echo"],
        model_fields={"temperature": 0.8, "top_p": 1, "max_tokens": 4096, "stream": True},
    )
    run = advance(start_run(agent))

    [sent] = fake_llm.requests(LLMCall.objects.get(run=run).model_name)
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"], sent["stream"]) == (0.8, 1, 4096, True)
    assert sent["tools"][0]["function"]["name"] == "test-echo"
    assert sent["messages"][0] == {"role": "system", "content": "You are a test agent."}
    assert sent == LLMCall.objects.get(run=run).request


# Commits: the run goes back to the broker in an on_commit callback, which the test counts.
@pytest.mark.django_db(transaction=True)
def test_long_run_goes_back_to_the_queue_between_steps(scripted_agent, settings, no_enqueue):
    settings.AGENTRY_TASK_SLICE_SECONDS = 0
    agent = scripted_agent(script(call("test-echo", {"text": "a"}), {"content": "done"}), tools=["test-echo"])
    run = start_run(agent)
    no_enqueue.clear()

    run = advance(run)
    assert run.status == "queued" and run.lease_owner == "" and no_enqueue == [str(run.pk)]
    assert run.events.filter(type="run.requeued", payload__reason="time slice used up").exists()
    while run.status == "queued":
        run = advance(run)
    assert run.status == "completed" and last_answer(run) == "done"
    assert LLMCall.objects.filter(run=run).count() == 2


def test_nul_characters_from_the_model_or_a_tool_do_not_break_a_step(scripted_agent):
    agent = scripted_agent(
        script(call("test-echo", {"text": "a\u0000b"}), {"content": "got {last_tool_result}\u0000!"}),
        tools=["test-echo"],
    )
    run = advance(start_run(agent))

    assert run.status == "completed"
    assert ToolInvocation.objects.get(run=run).result == "a\ufffdb"
    assert last_answer(run) == "got a\ufffdb\ufffd!"
