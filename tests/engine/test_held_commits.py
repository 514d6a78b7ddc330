"""A tool step's last commit is left pending for the model call that follows it (engine.loop's
Carried.pending): made by that call's attempt statement, or on its own, by the loop, before
whatever else the run does next. These tests hold
what must not change with it: a cancel accepted during the step still keeps the next model call
from being made, every other way out of the step records its outcome first, and losing the held
commit in a crash is a crash during the step, which recovery already handles."""

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from conversations.models import LLMCall, Message, Run, RunEvent, ToolInvocation
from engine import llm_step as llm_step_module
from engine.leases import process_owner, run_claim
from engine.loop import Carried, _step
from engine.summary import TRANSCRIPT_HEADING
from platform_site.logs import log_context
from tests.runs import advance, start_run


def script(*steps):
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def call(name: str, arguments: dict) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _events(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def test_the_outcome_rides_the_next_attempt_s_statement(scripted_agent):
    run = start_run(
        scripted_agent(script(call("test-echo", {"text": "one"}), {"content": "done"}), tools=["test-echo"])
    )

    with CaptureQueriesContext(connection) as queries:
        run = advance(run)

    assert run.status == "completed"
    statements = [query["sql"] for query in queries]
    if connection.vendor == "postgresql":  # SQLite takes the same statements one by one
        first, second = [sql for sql in statements if 'INSERT INTO "conversations_llmcall"' in sql]
        assert 'UPDATE "conversations_toolinvocation"' in second and 'NOT "cancel_requested"' in second
        assert 'UPDATE "conversations_toolinvocation"' not in first
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


def test_a_held_commit_lost_in_a_crash_is_a_crash_during_the_step(scripted_agent, executions):
    """A side-effecting call was marked started before it ran: with its outcome lost, the next
    worker reports it interrupted and never runs it again."""
    agent = scripted_agent(
        script(call("test-counter", {"label": "held"}), {"content": "done"}),
        tools=["test-counter"],
        approval={"test-counter": "never"},
    )
    run = start_run(agent)
    owner = process_owner()
    with log_context(run_id=run.pk):
        assert run_claim(run_id=run.pk, owner=owner)
        went = _step(run.pk, owner)  # the answer, which marks the call started
        assert isinstance(went, Carried) and went.started
        went = _step(run.pk, owner, went)  # the tool step, its commit left pending
        assert isinstance(went, Carried) and went.pending
    assert executions("held") == 1
    went.pending.take()  # the worker dies with it
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now())

    run = advance(run)

    assert run.status == "completed" and executions("held") == 1
    invocation = ToolInvocation.objects.get(run=run)
    assert (invocation.status, invocation.error) == ("error", "interrupted")


def test_a_history_folded_right_after_a_step_keeps_the_step_s_unwritten_messages(scripted_agent):
    """The step's tool result pushes the context over the agent's budget: the next call folds the
    earlier turn into the summary while the step's messages have no order yet (their commit is
    made by the summary call's attempt), and they are kept, never folded."""
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
