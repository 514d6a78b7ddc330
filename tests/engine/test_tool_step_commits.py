"""A tool step's last commit (its last call's outcome with the step's tool messages) is made
before whatever the run does next, and returns the run as it leaves it: a cancel accepted during
the step keeps the next model call from being made, and every way out of the step finds the
outcome recorded."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.models import LLMCall, Message, Run, RunEvent, ToolInvocation
from engine import llm_step as llm_step_module
from engine.context import TRANSCRIPT_HEADING
from tests.support.runs import advance, start_run


def script(*steps):
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def call(name: str, arguments: dict) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _events(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def test_the_outcome_commits_with_the_tool_message_before_the_next_attempt(scripted_agent):
    run = start_run(
        scripted_agent(script(call("test-echo", {"text": "one"}), {"content": "done"}), tools=["test-echo"])
    )

    with CaptureQueriesContext(connection) as queries:
        run = advance(run)

    assert run.status == "completed"
    statements = [query["sql"] for query in queries]
    if connection.vendor == "postgresql":  # SQLite takes the same statements one by one
        updates = [sql for sql in statements if 'UPDATE "conversations_toolinvocation"' in sql]
        [outcome] = [sql for sql in updates if "llmcall" not in sql]
        assert 'INSERT INTO "conversations_message"' in outcome
        second = [sql for sql in statements if 'INSERT INTO "conversations_llmcall"' in sql][1]
        assert statements.index(outcome) < statements.index(second)
    tool = Message.objects.get(run=run, role="tool")
    assert (tool.content, ToolInvocation.objects.get(run=run).status) == ("one", "succeeded")
    assert _events(run)[-4:] == ["tool.completed", "llm_call.started", "llm_call.completed", "run.completed"]
    # The events keep the order things happened in, without gaps.
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_cancel_accepted_during_the_step_keeps_the_next_model_call_from_being_made(scripted_agent):
    # test-cancel-run asks for its own run's cancel, as a person would while it is running.
    agent = scripted_agent(script(call("test-cancel-run", {}), {"content": "done"}), tools=["test-cancel-run"])

    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert LLMCall.objects.filter(run=run).count() == 1
    assert ToolInvocation.objects.get(run=run).status == "succeeded"
    assert Message.objects.filter(run=run, role="tool").count() == 1
    assert _events(run)[-2:] == ["tool.completed", "run.cancelled"]


def test_a_limit_reached_after_the_step_ends_the_run_with_the_outcome_recorded(scripted_agent):
    agent = scripted_agent(
        script(call("test-echo", {"text": "a"}), {"content": "never"}), tools=["test-echo"], max_iterations=1
    )

    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("completed", "max_iterations")
    roles = list(Message.objects.filter(run=run).order_by("order").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert ToolInvocation.objects.get(run=run).status == "succeeded"


def test_a_failure_before_the_next_request_records_the_outcome_then_the_failure(scripted_agent, monkeypatch):
    agent = scripted_agent(script(call("test-echo", {"text": "a"}), {"content": "never"}), tools=["test-echo"])
    built = llm_step_module.build_context
    calls = []

    def broken(**context):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the context could not be built")
        return built(**context)

    monkeypatch.setattr(llm_step_module, "build_context", broken)
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("failed", "internal_error")
    assert ToolInvocation.objects.get(run=run).status == "succeeded"
    assert Message.objects.filter(run=run, role="tool").count() == 1


def test_a_history_folded_right_after_a_step_keeps_the_step_s_messages(scripted_agent):
    """The step's tool result pushes the context over the agent's budget: the next call folds the
    earlier turn into the summary, and the run's own messages are kept, never folded."""
    long = "x" * 4000
    agent = scripted_agent(
        {
            "scenarios": [
                {"match": TRANSCRIPT_HEADING, "steps": [{"content": "the earlier turn"}]},
                {"match": "long", "steps": [call("test-echo", {"text": long}), {"content": "done"}]},
                {"match": ".", "steps": [{"content": "hello"}]},
            ]
        },
        tools=["test-echo"],
        context_token_budget=600,
    )
    earlier = advance(start_run(agent, "turn one"))
    run = advance(start_run(agent, "a long one", conversation=earlier.conversation))

    assert run.status == "completed"
    summary, step = LLMCall.objects.filter(run=run).order_by("id")[1:]
    assert (summary.purpose, step.purpose) == ("summary", "step")
    conversation = run.conversation
    conversation.refresh_from_db()
    tool = Message.objects.get(run=run, role="tool")
    first = Message.objects.filter(run=run).order_by("order").first()
    assert conversation.context_summary_through == first.order - 1 < tool.order
