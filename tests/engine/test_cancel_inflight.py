"""A cancel is honoured wherever it lands: during a model call, between tools, or too late (409)."""

import threading

from django.db import connection, transaction

from agents.models import AgentTool
from console.monitoring.selectors import run_events_after
from conversations.models import Approval, LLMCall, Message, Run, ToolInvocation
from conversations.services import conversation_create
from engine.runs import run_finish
from tests.support.api import client_for
from tests.support.factories import make_user
from tests.support.runs import advance, start_run
from tests.support.waits import wait_for


def script(*steps):
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def in_background(target, *args) -> threading.Thread:
    def run():
        try:
            target(*args)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def owned_run(agent, user) -> Run:
    return start_run(agent, conversation=conversation_create(agent=agent, owner=user))


def cancel_during_the_model_call(run: Run, user, held) -> int:
    """Advance the run in the background and cancel it through the API while its call is in
    flight: the model's answer is held until the cancel has been answered."""
    worker = in_background(advance, run)
    held.wait_arrived()
    assert LLMCall.objects.filter(run=run, status="started").exists()
    status = client_for(user).post(f"/api/v1/runs/{run.pk}/cancel/").status_code
    held.release()
    worker.join(30)
    return status


def test_cancel_during_the_final_model_call_ends_the_run_cancelled_and_keeps_the_late_answer(scripted_agent, fake_llm):
    user = make_user()
    with fake_llm.held() as held:
        agent = scripted_agent(script({"content": "the late answer", "hold": held.label}))
        run = owned_run(agent, user)

        assert cancel_during_the_model_call(run, user, held) == 202

    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    # The answer that came back is in the ledger, but it is not the run's answer anywhere.
    assert LLMCall.objects.get(run=run).status == "succeeded"
    assert Message.objects.filter(run=run, role="assistant", content="the late answer").exists()
    body = client_for(user).get(f"/api/v1/runs/{run.pk}/").json()
    assert (body["status"], body["output"]) == ("cancelled", None)
    assert run_events_after(run=run, after=0)["answer"] is None
    types = list(run.events.values_list("type", flat=True))
    assert "run.completed" not in types
    assert run.events.get(type="run.cancelled").payload["instead_of"] == "final_answer"


def test_tool_calls_asked_for_during_a_cancelled_model_call_are_recorded_cancelled(
    scripted_agent, executions, fake_llm
):
    user = make_user()
    with fake_llm.held() as held:
        agent = scripted_agent(
            script(
                {
                    "hold": held.label,
                    "tool_calls": [
                        {"id": "c1", "name": "test-counter", "arguments": {"label": "never"}},
                        {"id": "c2", "name": "test-counter", "arguments": '{"label": oops'},
                    ],
                }
            ),
            # Asking nobody: without the cancel, c1 would run as soon as the answer is recorded.
            tools=["test-counter"],
            approval={"test-counter": "never"},
        )
        run = owned_run(agent, user)

        assert cancel_during_the_model_call(run, user, held) == 202

    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    rows = list(
        ToolInvocation.objects.filter(run=run)
        .order_by("position")
        .values_list("tool_call_id", "status", "raw_arguments", "arguments")
    )
    assert rows == [
        ("c1", "cancelled", '{"label":"never"}', {"label": "never"}),
        ("c2", "cancelled", '{"label": oops', None),
    ]
    assert executions("never") == 0
    # The answer's statement would have marked c1 started had no cancel come: it was recorded
    # again without the mark (engine.llm_step), so nothing says a call started.
    assert not run.events.filter(type="tool.started").exists()


def test_a_cancel_while_a_tool_runs_keeps_the_next_tool_from_starting(scripted_agent):
    # test-cancel-run asks for its own run's cancel, as a person would while it is running.
    agent = scripted_agent(
        script(
            {
                "tool_calls": [
                    {"name": "test-cancel-run", "arguments": {}},
                    {"name": "test-echo", "arguments": {"text": "x"}},
                ]
            },
            {"content": "done"},
        ),
        tools=["test-cancel-run", "test-echo"],
    )
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    first, second = ToolInvocation.objects.filter(run=run).order_by("position")
    assert (first.status, second.status, second.result) == ("succeeded", "cancelled", "")
    assert not run.events.filter(type="tool.started", payload__tool="test-echo").exists()
    assert LLMCall.objects.filter(run=run).count() == 1


def test_a_run_whose_cancel_was_accepted_is_not_parked_for_approval(scripted_agent, executions):
    agent = scripted_agent(
        script(
            {
                "tool_calls": [
                    {"name": "test-cancel-run", "arguments": {}},
                    {"name": "test-counter", "arguments": {"label": "after-cancel"}},
                ]
            },
            {"content": "done"},
        ),
        tools=["test-cancel-run", "test-counter"],
    )
    AgentTool.objects.filter(agent=agent, tool__name="test-counter").update(approval=AgentTool.Approval.ALWAYS)
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert list(Approval.objects.filter(run=run).values_list("status", flat=True)) == ["cancelled"]
    assert executions("after-cancel") == 0


def test_a_cancel_that_arrives_after_the_run_ended_is_refused(scripted_agent):
    """The run ends between the API reading it and the cancel taking its lock: 409, not 202."""
    user = make_user()
    agent = scripted_agent(script({"content": "hi"}))
    run = owned_run(agent, user)
    responses = []
    with transaction.atomic():
        Run.objects.select_for_update().get(pk=run.pk)
        request = in_background(lambda: responses.append(client_for(user).post(f"/api/v1/runs/{run.pk}/cancel/")))
        wait_for(lambda: _waiting_for_a_lock(), message="the cancel to wait for the run's lock")
        run_finish(run_id=run.pk, status="completed", stop_reason="final_answer")
    request.join(30)

    [response] = responses
    assert response.status_code == 409
    assert "already completed" in response.json()["message"]
    run.refresh_from_db()
    assert run.status == "completed"


def _waiting_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0
