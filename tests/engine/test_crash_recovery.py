"""A worker dies between or inside steps: the run resumes from its last committed step, a
completed model call or tool call is never made again, and a side-effecting tool whose outcome
is unknown is reported instead of repeated."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import AgentTool
from conversations.models import LLMCall, Run, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from engine.sweeper import runs_sweep
from tests.support.runs import advance, last_answer, start_run
from tests.support.waits import wait_for
from tools import executors

pytestmark = pytest.mark.django_db


class WorkerDied(BaseException):
    """Stands for SIGKILL inside a step: not an Exception, so nothing in the loop handles it."""


def _crash_during_tool(monkeypatch):
    def die(**kwargs):
        raise WorkerDied()

    monkeypatch.setattr("engine.tool_step.execute_tool", die)


def _lapse_lease(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def _script(tool: str, arguments: dict) -> dict:
    return {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {"tool_calls": [{"name": tool, "arguments": arguments}]},
                    {"content": "result: {last_tool_result}"},
                ],
            }
        ]
    }


def _recover(run: Run, monkeypatch) -> Run:
    monkeypatch.setattr("engine.tool_step.execute_tool", executors.execute_tool)
    _lapse_lease(run)
    assert runs_sweep()["requeued"] == 1
    assert Run.objects.get(pk=run.pk).status == "queued"
    return advance(run)


def test_side_effecting_call_interrupted_mid_flight_is_not_repeated(scripted_agent, executions, monkeypatch, fake_llm):
    agent = scripted_agent(_script("test-counter", {"label": "crash"}), tools=["test-counter"])
    AgentTool.objects.filter(agent=agent).update(approval=AgentTool.Approval.NEVER)
    run = start_run(agent)
    _crash_during_tool(monkeypatch)
    with pytest.raises(WorkerDied):
        advance(run)
    run.refresh_from_db()
    assert run.status == "running" and ToolInvocation.objects.get(run=run).status == "running"

    run = _recover(run, monkeypatch)

    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.status == "error" and invocation.error == "interrupted"
    assert "outcome is unknown" in last_answer(run)
    assert executions("crash") == 0
    assert run.status == "completed" and run.recoveries == 1 and run.claims == 2
    # The first model call completed before the crash and was not made again.
    assert list(LLMCall.objects.filter(run=run).values_list("iteration", "attempt", "status")) == [
        (1, 1, "succeeded"),
        (2, 1, "succeeded"),
    ]
    assert len(fake_llm.requests(LLMCall.objects.filter(run=run).first().model_name)) == 2


def test_idempotent_call_interrupted_mid_flight_is_run_again(scripted_agent, monkeypatch):
    agent = scripted_agent(_script("test-echo", {"text": "again"}), tools=["test-echo"])
    run = start_run(agent)
    _crash_during_tool(monkeypatch)
    with pytest.raises(WorkerDied):
        advance(run)

    run = _recover(run, monkeypatch)

    assert ToolInvocation.objects.get(run=run).status == "succeeded"
    assert last_answer(run) == "result: again"


def test_model_call_interrupted_mid_flight_is_closed_and_attempted_again(scripted_agent, monkeypatch):
    agent = scripted_agent(_script("test-echo", {"text": "x"}), tools=["test-echo"])
    run = start_run(agent)

    def die(self, **kwargs):
        raise WorkerDied()

    # Only this patch is undone: the fixture's patch keeping runs off the queue (no_enqueue)
    # must stay; this test advances the run itself.
    with monkeypatch.context() as patch:
        patch.setattr("agents.providers.openai_compatible.OpenAICompatibleProvider.send", die)
        with pytest.raises(WorkerDied):
            advance(run)
    _lapse_lease(run)
    runs_sweep()
    run = advance(run)

    calls = list(LLMCall.objects.filter(run=run).values_list("iteration", "attempt", "status"))
    assert calls == [(1, 1, "failed"), (1, 2, "succeeded"), (2, 1, "succeeded")]
    assert "interrupted" in LLMCall.objects.get(run=run, attempt=1, iteration=1).error
    assert run.status == "completed"


def test_run_recovered_too_often_fails_with_a_clear_reason(scripted_agent, settings):
    agent = scripted_agent(_script("test-echo", {"text": "x"}), tools=["test-echo"])
    run = start_run(agent)
    Run.objects.filter(pk=run.pk).update(
        status="running", lease_owner="gone", recoveries=settings.AGENTRY_RUN_MAX_RECOVERIES
    )
    _lapse_lease(run)

    assert runs_sweep()["failed"] == 1
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("failed", "worker_lost")
    assert "stopped responding" in run.error


def _give_up(run: Run, settings) -> Run:
    Run.objects.filter(pk=run.pk).update(recoveries=settings.AGENTRY_RUN_MAX_RECOVERIES)
    _lapse_lease(run)
    assert runs_sweep()["failed"] == 1
    run.refresh_from_db()
    return run


def test_run_given_up_mid_model_call_shows_the_call_interrupted(scripted_agent, monkeypatch, settings):
    agent = scripted_agent(_script("test-echo", {"text": "x"}), tools=["test-echo"])
    run = start_run(agent)

    def die(self, **kwargs):
        raise WorkerDied()

    monkeypatch.setattr("agents.providers.openai_compatible.OpenAICompatibleProvider.send", die)
    with pytest.raises(WorkerDied):
        advance(run)

    run = _give_up(run, settings)

    assert (run.status, run.stop_reason) == ("failed", "worker_lost")
    call = LLMCall.objects.get(run=run)
    assert call.status == "failed" and "interrupted" in call.error and call.finished_at is not None


def test_run_given_up_mid_tool_call_shows_the_call_interrupted(scripted_agent, monkeypatch, settings):
    agent = scripted_agent(_script("test-counter", {"label": "given-up"}), tools=["test-counter"])
    AgentTool.objects.filter(agent=agent).update(approval=AgentTool.Approval.NEVER)
    run = start_run(agent)
    _crash_during_tool(monkeypatch)
    with pytest.raises(WorkerDied):
        advance(run)

    run = _give_up(run, settings)

    assert (run.status, run.stop_reason) == ("failed", "worker_lost")
    invocation = ToolInvocation.objects.get(run=run)
    assert (invocation.status, invocation.error) == ("error", "interrupted")
    assert "outcome is unknown" in invocation.result and invocation.finished_at is not None


def test_live_lease_is_not_taken_over(scripted_agent):
    agent = scripted_agent(_script("test-echo", {"text": "x"}), tools=["test-echo"])
    run = start_run(agent)
    Run.objects.filter(pk=run.pk).update(
        status="running", lease_owner="other-worker", lease_expires_at=timezone.now() + timedelta(seconds=60)
    )
    run = advance(run)
    assert run.status == "running" and run.lease_owner == "other-worker"
    assert runs_sweep()["requeued"] == 0
    assert not LLMCall.objects.filter(run=run).exists()


@pytest.mark.e2e
def test_worker_killed_between_steps_resumes_without_repeating(worker, fake_llm, executions):
    from tests.support.factories import ModelConfigFactory, make_agent

    with fake_llm.held() as held:
        name = fake_llm.script(
            "crash-e2e",
            {
                "scenarios": [
                    {
                        "match": ".",
                        "steps": [
                            {"tool_calls": [{"name": "test-counter", "arguments": {"label": "e2e-kill"}}]},
                            # The second model call is held: the worker is killed while it waits on it.
                            {"content": "recorded", "hold": held.label},
                        ],
                    }
                ]
            },
        )
        agent = make_agent(
            tools=["test-counter"], model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=name)
        )
        AgentTool.objects.filter(agent=agent).update(approval=AgentTool.Approval.NEVER)
        run = message_post(conversation=conversation_create(agent=agent), content="go")

        held.wait_arrived()
        assert LLMCall.objects.filter(run=run, iteration=2, status="started").exists()
        assert ToolInvocation.objects.get(run=run).status == "succeeded"
        worker.kill()
        assert Run.objects.get(pk=run.pk).status == "running"
    # Released: the call taken again on the new worker is answered at once.

    worker.start()
    wait_for(lambda: runs_sweep()["requeued"], timeout=20, interval=0.5, message="the lease to lapse")
    run = wait_for(
        lambda: Run.objects.filter(pk=run.pk, status="completed").first(),
        timeout=30,
        message="the run to complete on the new worker",
    )

    assert executions("e2e-kill") == 1
    assert ToolInvocation.objects.filter(run=run).count() == 1
    calls = list(LLMCall.objects.filter(run=run).values_list("iteration", "attempt", "status"))
    assert calls == [(1, 1, "succeeded"), (2, 1, "failed"), (2, 2, "succeeded")]
    assert run.recoveries == 1 and last_answer(run) == "recorded"
