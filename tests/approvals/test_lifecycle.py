"""Expiry, cancellation and re-delivery: nothing left pending, nothing run twice."""

import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from conversations.models import Approval, Message, Run, RunEvent, ToolInvocation
from engine import tool_step
from engine.approvals import ApprovalConflict, approval_decide, approvals_expire
from engine.loop import run_advance
from engine.runs import run_cancel
from engine.sweeper import runs_sweep
from engine.tasks import run_advance_task
from tests.approvals.conftest import counter_steps
from tests.support.tool_fixtures import COUNTER_KEY, redis_client
from tools.executors import execute_tool


def _parked(run) -> Run:
    run_advance(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "awaiting_approval", run.error
    return run


def _overdue(*approvals) -> None:
    Approval.objects.filter(pk__in=[a.pk for a in approvals]).update(expires_at=timezone.now() - timedelta(seconds=1))


# Commits: a decision hands the run back to the broker in an on_commit callback, which the test follows.
@pytest.mark.django_db(transaction=True)
def test_expired_approval_tells_the_model_and_the_run_continues(scenario, enqueued, executions):
    s = scenario(steps=counter_steps("late", reply="Answer: {last_tool_result}"))
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)
    _overdue(approval)
    enqueued.clear()

    assert approvals_expire() == 1
    approval.refresh_from_db()
    assert (approval.status, approval.channel, approval.decided_by) == ("expired", "system", None)
    assert RunEvent.objects.filter(run=run, type="approval.expired").count() == 1
    assert Run.objects.get(pk=run.pk).status == "queued" and enqueued == [str(run.pk)]

    run_advance(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "completed" and executions("late") == 0
    assert ToolInvocation.objects.get(run=run).error == "expired"
    assert "Nobody approved" in s.requests()[-1]["messages"][-1]["content"]
    assert not Approval.objects.filter(status="pending").exists()
    assert approvals_expire() == 0


def test_expired_approval_ends_the_run_when_the_policy_says_so(scenario, enqueued, executions):
    s = scenario(
        steps=counter_steps("first", "second"), tool_settings={"test-counter": {"approval_on_expiry": "end_run"}}
    )
    run = _parked(s.post())
    first, second = Approval.objects.filter(run=run).order_by("invocation__position")
    _overdue(first)

    assert approvals_expire() == 1
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("expired", "approval_expired")
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == "expired" and second.status == "cancelled"
    assert set(ToolInvocation.objects.filter(run=run).values_list("status", flat=True)) == {"cancelled"}
    assert "nobody decided" in Message.objects.filter(run=run, role="assistant").last().content
    assert executions("first") == executions("second") == 0
    assert not Approval.objects.filter(status="pending").exists()


def test_an_overdue_approval_cannot_be_decided_even_before_the_task_ran(scenario, enqueued, approver):
    s = scenario(steps=counter_steps("overdue"))
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)
    _overdue(approval)
    with pytest.raises(ApprovalConflict, match="expired"):
        approval_decide(approval_id=approval.pk, user=approver, decision="approve", channel="api")


def test_expiry_runs_on_the_beat():
    entry = next(e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "engine.tasks.approvals_expire_task")
    assert entry["schedule"] <= 60
    assert settings.CELERY_TASK_ROUTES["engine.tasks.approvals_expire_task"]["queue"] == "maintenance"


def test_cancel_closes_pending_approvals_and_the_conversation_goes_on(scenario, enqueued, executions, approver):
    s = scenario(steps=counter_steps("x", "y"), match="^transfer", fallback={"content": "fresh answer"})
    run = _parked(s.post("transfer it"))

    run = run_cancel(run=run, by=approver)
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    approvals = list(Approval.objects.filter(run=run))
    assert {(a.status, a.channel, a.reason) for a in approvals} == {("cancelled", "system", "run cancelled")}
    assert RunEvent.objects.filter(run=run, type="approval.cancelled").count() == 2
    assert set(ToolInvocation.objects.filter(run=run).values_list("status", flat=True)) == {"cancelled"}
    with pytest.raises(ApprovalConflict, match="already cancelled"):
        approval_decide(approval_id=approvals[0].pk, user=approver, decision="approve", channel="api")

    next_run = s.post("what now?")
    run_advance(run_id=next_run.pk)
    next_run.refresh_from_db()
    assert next_run.status == "completed"
    assert Message.objects.filter(run=next_run, role="assistant").last().content == "fresh answer"
    # The dead tool calls are not sent to the model (providers reject calls without results).
    sent = s.requests()[-1]["messages"]
    assert not any(m.get("tool_calls") for m in sent)
    assert executions("x") == executions("y") == 0


class WorkerDied(BaseException):
    """The process running the step is gone: nothing after this point happens."""


def test_redelivered_task_does_not_run_an_executed_approved_call_again(
    scenario, enqueued, executions, approver, monkeypatch
):
    redis_client().delete(f"{COUNTER_KEY}:keys:once")
    s = scenario(steps=counter_steps("once"))
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)
    approval_decide(approval_id=approval.pk, user=approver, decision="approve", channel="api")

    def runs_then_dies(**kwargs):
        execute_tool(**kwargs)
        raise WorkerDied()

    with monkeypatch.context() as patch:
        patch.setattr(tool_step, "execute_tool", runs_then_dies)
        with pytest.raises(WorkerDied):
            run_advance_task(str(run.pk))
    invocation = ToolInvocation.objects.get(run=run)
    assert executions("once") == 1 and invocation.status == "running"

    # The lease lapses; the sweeper requeues the run and the broker delivers the task again.
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert runs_sweep()["requeued"] == 1
    run_advance_task(str(run.pk))
    run_advance_task(str(run.pk))  # and once more, for good measure: a finished run is not claimed

    run.refresh_from_db()
    invocation.refresh_from_db()
    assert run.status == "completed"
    assert executions("once") == 1
    # The one execution received the call's idempotency key: run id and tool call id.
    keys = [k.decode() for k in redis_client().lrange(f"{COUNTER_KEY}:keys:once", 0, -1)]
    assert keys == [f"{run.pk}:{invocation.tool_call_id}"]
    assert invocation.status == "error" and invocation.error == "interrupted"
    assert "not run again" in s.requests()[-1]["messages"][-1]["content"]


# Commits: the two deliveries run on threads of their own, each with its own connection.
@pytest.mark.django_db(transaction=True)
def test_task_delivered_twice_at_once_runs_the_approved_call_once(scenario, enqueued, executions, approver):
    s = scenario(steps=counter_steps("duplicate"))
    run = _parked(s.post())
    approval_decide(approval_id=Approval.objects.get(run=run).pk, user=approver, decision="approve", channel="api")
    barrier = threading.Barrier(2)

    def deliver():
        try:
            barrier.wait()
            run_advance_task(str(run.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    run.refresh_from_db()
    assert run.status == "completed" and executions("duplicate") == 1
    assert ToolInvocation.objects.get(run=run).status == "succeeded"
