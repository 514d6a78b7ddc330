"""Approvals through the real queue: a real worker parks the run, the API decision resumes it."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from conversations.models import Approval, Message, Run, RunEvent
from engine.tasks import approvals_expire_task, run_advance_task
from tests.approvals.conftest import counter_steps
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def _status(run, status: str, timeout: float = 30) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run.pk, status=status).first(),
        timeout=timeout,
        message=f"run {run.pk} to be {status} (is {Run.objects.get(pk=run.pk).status})",
    )


def test_api_approval_resumes_the_run_on_the_worker_and_a_second_delivery_runs_nothing(
    worker, scenario, approver, executions
):
    s = scenario(steps=counter_steps("e2e-write"))
    run = _status(s.post(), "awaiting_approval")
    approval = Approval.objects.get(run=run)
    assert executions("e2e-write") == 0

    client = APIClient()
    client.force_authenticate(approver)
    response = client.post(f"/api/v1/approvals/{approval.pk}/decision/", {"decision": "approve"}, format="json")
    assert response.status_code == 200
    # The broker hands the same run out again right away, as a redelivery after a crash would.
    run_advance_task.delay(str(run.pk))

    run = _status(run, "completed")
    assert executions("e2e-write") == 1
    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert events.index("approval.requested") < events.index("run.awaiting_approval") < events.index("approval.decided")
    assert events.count("tool.started") == 1 and events[-1] == "run.completed"


def test_the_beat_task_expires_approvals_and_the_worker_tells_the_model(worker, scenario, executions):
    s = scenario(steps=counter_steps("e2e-late", reply="Answer: {last_tool_result}"))
    run = _status(s.post(), "awaiting_approval")
    Approval.objects.filter(run=run).update(expires_at=timezone.now() - timedelta(seconds=1))

    approvals_expire_task.delay()

    run = _status(run, "completed")
    assert Approval.objects.get(run=run).status == "expired" and executions("e2e-late") == 0
    assert "Nobody approved" in Message.objects.filter(run=run, role="assistant").last().content
