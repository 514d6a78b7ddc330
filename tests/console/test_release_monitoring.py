"""Releases on the operator pages: the dashboard's live versions side by side, and the try page's
choice of version (draft, published or a number), which takes the permission to test versions."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent
from agents.releases import canary_start, version_publish
from console.monitoring.selectors import live_versions
from conversations.models import Run
from evals.models import EvalRun, EvalSuite
from tests.security.privileges import user_with
from tests.support.factories import make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db

TRY = ("conversations.view_run", "conversations.add_run")


def test_live_versions_compares_the_published_version_and_the_canary(admin_user):
    now = timezone.now()
    agent = make_agent(name="Canaried")
    make_agent(name="Never published")
    operator = user_with("agents.publish_agent")
    stable = version_publish(agent=agent, user=operator, note="Stable.").version
    Agent.objects.filter(pk=agent.pk).update(system_prompt="Candidate.")
    candidate = canary_start(agent=agent, percent=20, user=operator, note="Try.").version
    for status, reason, version, tokens, cost in [
        ("completed", "final_answer", stable, 100, "0.10"),
        ("completed", "final_answer", stable, 300, "0.30"),
        ("completed", "final_answer", candidate, 50, "0.05"),
        ("failed", "provider_error", candidate, 10, "0.01"),
    ]:
        run = ledger_run(agent, status=status, stop_reason=reason, finished_at=now, total_tokens=tokens, cost=cost)
        Run.objects.filter(pk=run.pk).update(agent_version=version)
        ledger_call(run, started_at=now, latency_ms=200 if version == stable else 600)
    old = ledger_run(agent, finished_at=now, created_at=now - timedelta(days=3))
    Run.objects.filter(pk=old.pk).update(agent_version=stable)
    # An evaluation's run of the candidate is not live traffic; its score is shown beside.
    evaluated = ledger_run(agent, status="failed", stop_reason="provider_error", finished_at=now)
    Run.objects.filter(pk=evaluated.pk).update(agent_version=candidate, sandbox={"results": {}})
    suite = EvalSuite.objects.create(name="smoke")
    EvalRun.objects.create(
        suite=suite,
        agent_version=candidate,
        status="completed",
        finished_at=now - timedelta(hours=2),
        metrics={"task_completion_rate": 0.25},
    )
    latest = EvalRun.objects.create(
        suite=suite,
        agent_version=candidate,
        status="completed",
        finished_at=now,
        metrics={"task_completion_rate": 0.75},
    )
    EvalRun.objects.create(suite=suite, agent_version=candidate, status="running")

    [row] = live_versions(user=admin_user, start=now - timedelta(hours=1))
    published, canary = row["versions"]
    assert row["name"] == "Canaried"
    assert published == {
        "role": "published",
        "number": stable.number,
        "share": 80,
        "runs": 2,
        "failed": 0,
        "failure_rate": 0.0,
        "stop_reasons": [{"stop_reason": "final_answer", "count": 2}],
        "tokens": 400,
        "cost": "0.40000000",
        "latency_ms": 200,
        "feedback": 0,
        "negative_feedback": 0,
        "negative_feedback_rate": None,
        "eval": None,
    }
    assert canary["role"] == "canary" and canary["share"] == 20 and canary["runs"] == 2
    assert canary["failure_rate"] == 0.5 and canary["latency_ms"] == 600
    assert canary["eval"] == {"id": latest.pk, "suite": "smoke", "completion": 0.75}
    assert sorted(r["stop_reason"] for r in canary["stop_reasons"]) == ["final_answer", "provider_error"]


def test_the_try_page_runs_the_version_asked_for_only_with_the_permission(client, no_enqueue):
    agent = make_agent(system_prompt="Published prompt.")
    version_publish(agent=agent, user=user_with("agents.publish_agent"), note="One.")
    Agent.objects.filter(pk=agent.pk).update(system_prompt="Draft prompt.")
    url = reverse("monitoring:try-send")

    client.force_login(user_with(*TRY))
    live = client.post(url, {"agent": agent.pk, "content": "hi"})
    assert live.status_code == 201
    assert Run.objects.get(pk=live.json()["run_id"]).agent_version.snapshot["agent"]["system_prompt"] == (
        "Published prompt."
    )
    refused = client.post(url, {"agent": agent.pk, "content": "hi", "version": "draft"})
    assert refused.status_code == 400 and "permission" in refused.json()["message"]

    client.force_login(user_with(*TRY, "agents.test_agent_version"))
    draft = client.post(url, {"agent": agent.pk, "content": "hi", "version": "draft"})
    assert draft.status_code == 201
    run = Run.objects.get(pk=draft.json()["run_id"])
    assert run.agent_version.snapshot["agent"]["system_prompt"] == "Draft prompt."
    for bad in ("v2", "0", "99", "x" * 30):
        response = client.post(url, {"agent": agent.pk, "content": "hi", "version": bad})
        assert response.status_code == 400, bad
    numbered = client.post(url, {"agent": agent.pk, "content": "hi", "version": "1"})
    assert Run.objects.get(pk=numbered.json()["run_id"]).agent_version.number == 1
