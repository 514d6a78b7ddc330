"""The staff pages: dashboard (page, panel, JSON), run timeline (page, JSON, copy), the events
endpoint the try-an-agent page polls, and the links to them from the admin."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from conversations.batch import run_event_append
from conversations.models import Approval, Conversation, Run, ToolInvocation
from conversations.monitoring.rollups import rollups_refresh
from tests.support.factories import make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def quiet_broker(monkeypatch):
    monkeypatch.setattr(
        "console.monitoring.selectors.queue_depths",
        lambda: {"transport": "redis", "queues": [{"name": "llm", "depth": 4}], "error": ""},
    )
    monkeypatch.setattr(
        "console.monitoring.selectors.workers_online", lambda: {"online": ["worker-a@host"], "error": ""}
    )


@pytest.mark.parametrize("name", ["monitoring:dashboard", "monitoring:panel", "monitoring:data", "monitoring:try"])
def test_pages_are_for_staff_only(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    client.force_login(get_user_model().objects.create_user("visitor", password="pw"))
    assert client.get(reverse(name)).status_code == 403


def test_dashboard_shows_runs_queues_workers_stuck_runs_latency_and_usage(client, staff, quiet_broker):
    now = timezone.now()
    agent = make_agent(name="Support bot")
    run = ledger_run(agent, finished_at=now)
    ledger_call(run, started_at=now, latency_ms=800, prompt_tokens=1500, completion_tokens=500, cost="0.75")
    ledger_run(agent, status="failed", stop_reason="provider_error", error="HTTP 502: bad gateway", finished_at=now)
    stuck = ledger_run(
        agent,
        status="running",
        stop_reason="",
        lease_owner="gone:1:x",
        lease_expires_at=now - timedelta(seconds=30),
        created_at=now - timedelta(minutes=3),
    )
    rollups_refresh()

    page = client.get(reverse("monitoring:dashboard")).content.decode()

    assert 'data-status="running">1<' in page and 'data-queue="llm">4<' in page
    assert "worker-a@host" in page
    assert f'data-run="{stuck.pk}"' in page and "lease lapsed" in page
    assert reverse("monitoring:run-action", args=[stuck.pk, "requeue"]) in page
    assert "50.0 %" in page and "HTTP 502: bad gateway" in page and "Provider error" in page
    assert "<svg" in page and "Support bot" in page and "2000" in page
    panel = client.get(reverse("monitoring:panel")).content.decode()
    assert f'data-run="{stuck.pk}"' in panel and "<html" not in panel


def test_data_endpoint_answers_json_and_rejects_bad_windows(client, staff, quiet_broker, settings):
    settings.AGENTRY_FLOWER_URL = "http://flower.example:5555"
    data = client.get(reverse("monitoring:data"), {"hours": 6}).json()
    assert data["hours"] == 6 and len(data["runs_by_hour"]) == 6
    assert data["broker"]["queues"] == [{"name": "llm", "depth": 4}]
    assert data["flower_url"] == "http://flower.example:5555"
    assert 'href="http://flower.example:5555"' in client.get(reverse("monitoring:dashboard")).content.decode()

    response = client.get(reverse("monitoring:data"), {"hours": "lots"})
    assert response.status_code == 400
    assert response.json() == {"message": "hours must be a whole number from 1 to 168.", "extra": {}}
    assert client.get(reverse("monitoring:data"), {"days": 90}).status_code == 400


def _run_with_tool_and_approval(decider):
    now = timezone.now()
    run = ledger_run(make_agent(), finished_at=now)
    call = ledger_call(
        run,
        started_at=now - timedelta(seconds=2),
        latency_ms=321,
        prompt_tokens=11,
        completion_tokens=7,
        cached_tokens=3,
        reasoning_tokens=2,
        cost="0.00042",
    )
    call.response = {"choices": [{"message": {"content": None, "tool_calls": ["…"]}}]}
    call.save()
    invocation = ToolInvocation.objects.create(
        run=run,
        llm_call=call,
        tool_name="send-mail",
        tool_call_id="call_1",
        arguments={"to": "ops@example.com"},
        raw_arguments='{"to": "ops@example.com"}',
        status="succeeded",
        result="sent",
        idempotency_key="k",
        latency_ms=55,
    )
    Approval.objects.create(
        invocation=invocation,
        run=run,
        status="approved",
        arguments=invocation.arguments,
        arguments_hash="h",
        decided_by=decider,
        decided_at=now,
        channel="web",
        reason="looks fine",
    )
    ledger_call(run, started_at=now - timedelta(seconds=1), iteration=2)
    run_event_append(run_id=run.pk, type="run.completed", payload={"stop_reason": "final_answer"})
    return run


def _queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_timeline_page_shows_steps_tokens_cost_latency_tool_and_approval(client, staff):
    run = _run_with_tool_and_approval(staff)
    longer = _run_with_tool_and_approval(staff)
    for i in range(3, 13):
        ledger_call(longer, started_at=timezone.now(), iteration=i)
    # No query per step: a run with ten more steps costs the same number of queries.
    assert _queries(client, reverse("monitoring:run", args=[run.pk])) == _queries(
        client, reverse("monitoring:run", args=[longer.pk])
    )

    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()

    assert "11 / 7 / 3 / 2" in page and "0.00042" in page and "321 ms" in page
    assert "send-mail" in page and "ops@example.com" in page and "55 ms" in page
    assert "approval approved by oncall" in page and "via web: looks fine" in page
    steps = page[page.index('id="steps"') :]
    assert steps.index("Model call 1</strong>") < steps.index("send-mail") < steps.index("Model call 2</strong>")
    assert "Copy as JSON" in page
    embedded = json.loads(page.split('id="timeline-data" type="application/json">')[1].split("</script>")[0])
    assert embedded == client.get(reverse("monitoring:run-json", args=[run.pk])).json()


def test_timeline_json_has_every_step_in_order_and_the_events(client, staff):
    run = _run_with_tool_and_approval(staff)
    data = client.get(reverse("monitoring:run-json", args=[run.pk])).json()

    assert [step["kind"] for step in data["steps"]] == ["llm_call", "tool_invocation", "llm_call"]
    first, tool = data["steps"][0], data["steps"][1]
    assert first["tokens"] == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "cached_tokens": 3,
        "reasoning_tokens": 2,
        "total_tokens": 18,
    }
    # The request (the agent's system prompt) is for those who may read agents; this user may not.
    assert first["request"] is None and first["response"]["choices"]
    assert tool["arguments"] == {"to": "ops@example.com"} and tool["result"] == "sent"
    assert tool["approval"]["decided_by"] == "oncall" and tool["approval"]["channel"] == "web"
    assert data["run"]["id"] == str(run.pk) and data["events"][0]["type"] == "run.completed"
    assert client.get(reverse("monitoring:run-json", args=["00000000-0000-0000-0000-000000000000"])).status_code == 404


def test_admin_links_to_the_timeline_the_monitor_and_the_try_page(client, staff):
    staff.is_superuser = True
    staff.save()
    run = ledger_run(make_agent(), finished_at=timezone.now())
    page = client.get(reverse("admin:conversations_run_change", args=[run.pk])).content.decode()
    assert reverse("monitoring:run", args=[run.pk]) in page
    assert reverse("monitoring:dashboard") in client.get(reverse("admin:conversations_run_changelist")).content.decode()
    page = client.get(reverse("admin:agents_agent_change", args=[run.agent_id])).content.decode()
    assert f"{reverse('monitoring:try')}?agent={run.agent_id}" in page


def test_events_endpoint_returns_events_after_a_sequence_number_and_the_answer(client, staff):
    run = ledger_run(make_agent(), status="running", stop_reason="")
    for kind in ("run.queued", "run.running", "llm_call.started"):
        run_event_append(run_id=run.pk, type=kind)
    url = reverse("monitoring:run-events", args=[run.pk])

    data = client.get(url, {"after": 1}).json()
    assert [e["seq"] for e in data["events"]] == [2, 3] and data["run"]["terminal"] is False
    assert data["answer"] is None
    assert client.get(url, {"after": -1}).status_code == 400

    Run.objects.filter(pk=run.pk).update(status="completed", stop_reason="final_answer")
    from conversations.services import messages_append

    messages_append(
        conversation_id=run.conversation_id, run_id=run.pk, messages=[{"role": "assistant", "content": "42"}]
    )
    data = client.get(url, {"after": 3}).json()
    assert data["events"] == [] and data["run"]["terminal"] is True and data["answer"] == "42"


def test_try_send_posts_through_the_queue_and_continues_the_conversation(
    client, staff, no_enqueue, django_capture_on_commit_callbacks
):
    agent = make_agent()
    with django_capture_on_commit_callbacks(execute=True):
        first = client.post(reverse("monitoring:try-send"), {"agent": agent.pk, "content": "hello"})
    assert first.status_code == 201
    body = first.json()
    run = Run.objects.get(pk=body["run_id"])
    assert run.conversation.owner == staff and run.status == "queued" and no_enqueue == [body["run_id"]]
    assert body["events_url"] == reverse("monitoring:run-events", args=[run.pk])

    busy = client.post(
        reverse("monitoring:try-send"),
        {"agent": agent.pk, "content": "too soon", "conversation": body["conversation_id"]},
    )
    assert busy.status_code == 409 and "one message at a time" in busy.json()["message"]
    Run.objects.filter(pk=run.pk).update(status="completed")
    with django_capture_on_commit_callbacks(execute=True):
        second = client.post(
            reverse("monitoring:try-send"),
            {"agent": agent.pk, "content": "and again", "conversation": body["conversation_id"]},
        )
    assert second.json()["conversation_id"] == body["conversation_id"]
    assert Conversation.objects.get(pk=body["conversation_id"]).runs.count() == 2

    missing = client.post(reverse("monitoring:try-send"), {"agent": agent.pk, "content": ""})
    assert missing.status_code == 400 and missing.json()["message"].startswith("content:")
    other = make_agent()
    wrong = client.post(
        reverse("monitoring:try-send"), {"agent": other.pk, "content": "hi", "conversation": body["conversation_id"]}
    )
    assert wrong.status_code == 400 and "not yours" in wrong.json()["message"]

    page = client.get(reverse("monitoring:try"), {"agent": agent.pk}).content.decode()
    assert f'<option value="{agent.pk}" selected>' in page
