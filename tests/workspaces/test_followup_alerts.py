"""An alert rule counts only its own workspace's ledger (runs, model calls, feedback, approvals,
costs), "everything" included, and its firing goes to its own workspace's webhooks only."""

from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.models import AlertFiring
from alerts.services import alert_rules_evaluate
from conversations.models import Run
from notifications.models import Webhook, WebhookDelivery
from tests.alerts.conftest import make_rule, pending_approval
from tests.support.factories import AgentFactory, ModelConfigFactory
from tests.support.ledger import ledger_call, ledger_run
from workspaces.access import of_workspace
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


def _agent(workspace: Workspace, tag: str):
    model = ModelConfigFactory(workspace=workspace, name=f"model-{tag}")
    return AgentFactory(workspace=workspace, model_config=model, slug=f"agent-{tag}")


@pytest.fixture
def two():
    a = Workspace.objects.create(name="Alpha", slug="alpha")
    b = Workspace.objects.create(name="Bravo", slug="bravo")
    return a, b, _agent(a, "alpha"), _agent(b, "bravo")


def _failures(agent, n: int, now) -> None:
    for _ in range(n):
        ledger_run(agent, status="failed", stop_reason="error", error="boom", finished_at=now - timedelta(minutes=1))


def _evaluate(capture, now):
    with capture(execute=True):
        return alert_rules_evaluate(now=now)


def test_a_burst_of_failures_in_another_workspace_does_not_fire_the_rule(
    two, sent_deliveries, django_capture_on_commit_callbacks
):
    a, b, agent_a, agent_b = two
    now = timezone.now()
    hook_a = Webhook.objects.create(
        workspace=a, agent=agent_a, url="https://a.example.com/h", secret="s" * 32, receives_alerts=True
    )
    Webhook.objects.create(
        workspace=b, agent=agent_b, url="https://b.example.com/h", secret="s" * 32, receives_alerts=True
    )
    # Watching "everything": everything of its own workspace.
    rule = make_rule(workspace=a, kind="failure_rate", threshold=50, min_runs=3)
    ledger_run(agent_a, finished_at=now - timedelta(minutes=2))
    _failures(agent_b, 6, now)

    assert _evaluate(django_capture_on_commit_callbacks, now)["fired"] == 0
    assert not AlertFiring.objects.exists() and not WebhookDelivery.objects.exists()

    _failures(agent_a, 3, now)
    assert _evaluate(django_capture_on_commit_callbacks, now)["fired"] == 1
    [firing] = AlertFiring.objects.all()
    assert firing.rule == rule and firing.summary.startswith("3 of 4 runs failed")
    # Told to its own workspace's subscribed webhooks only.
    [delivery] = WebhookDelivery.objects.all()
    assert delivery.webhook == hook_a and sent_deliveries == [str(delivery.pk)]


def test_tokens_cost_and_pending_approvals_of_another_workspace_are_not_counted(
    two, sent_deliveries, django_capture_on_commit_callbacks
):
    a, b, agent_a, agent_b = two
    now = timezone.now()
    make_rule(workspace=a, name="tokens", kind="tokens", threshold=500)
    make_rule(workspace=a, name="cost", kind="cost", threshold="0.5")
    make_rule(workspace=a, name="approvals", kind="approval_age", threshold=5)
    make_rule(workspace=a, name="stuck", kind="stuck_runs", threshold=5)
    run_b = ledger_run(agent_b)
    ledger_call(run_b, started_at=now - timedelta(minutes=3), prompt_tokens=900, completion_tokens=100, cost="9")
    pending_approval(agent_b, created_at=now - timedelta(minutes=30))
    ledger_run(agent_b, status="running", stop_reason="", created_at=now - timedelta(minutes=30))

    assert _evaluate(django_capture_on_commit_callbacks, now)["fired"] == 0

    run_a = ledger_run(agent_a)
    ledger_call(run_a, started_at=now - timedelta(minutes=3), prompt_tokens=900, completion_tokens=100, cost="9")
    pending_approval(agent_a, created_at=now - timedelta(minutes=30))
    ledger_run(agent_a, status="running", stop_reason="", created_at=now - timedelta(minutes=30))
    assert _evaluate(django_capture_on_commit_callbacks, now)["fired"] == 4
    summaries = dict(AlertFiring.objects.values_list("rule__name", "summary"))
    assert summaries["tokens"].startswith("1120 tokens")  # its own call and its approval's, not B's
    assert summaries["approvals"].startswith("1 approval pending")


def test_of_workspace_narrows_by_the_models_path(two):
    a, b, agent_a, agent_b = two
    run_a, run_b = ledger_run(agent_a), ledger_run(agent_b)
    assert list(of_workspace(Run.objects.all(), a.pk)) == [run_a]
    assert list(of_workspace(Run.objects.all(), b.pk)) == [run_b]
    # A model with no workspace path has no rows of any workspace.
    assert not of_workspace(Workspace.objects.all(), a.pk).exists()
