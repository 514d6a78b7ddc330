"""Least privilege on the operator pages and through API tokens: each page, JSON endpoint and
action asks for the permission that matches its power, and a staff member's token reaches
other users' conversations only as far as their permissions say, never to act in them."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from conversations.models import Approval, Conversation, Message, Run, ToolInvocation
from tests.security.privileges import user_with
from tests.support.api import client_for
from tests.support.factories import make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db

VIEW, OPERATE, ADD = "conversations.view_run", "conversations.operate_run", "conversations.add_run"


@pytest.fixture
def quiet_broker(monkeypatch):
    monkeypatch.setattr(
        "console.monitoring.selectors.queue_depths", lambda: {"transport": "redis", "queues": [], "error": ""}
    )
    monkeypatch.setattr("console.monitoring.selectors.workers_online", lambda: {"online": [], "error": ""})


@pytest.fixture
def run(db):
    past = timezone.now() - timedelta(minutes=5)
    return ledger_run(
        make_agent(), status="running", stop_reason="", lease_owner="gone:1:x", lease_expires_at=past, created_at=past
    )


def _reading_urls(run) -> list[str]:
    return [
        reverse("monitoring:dashboard"),
        reverse("monitoring:panel"),
        reverse("monitoring:data"),
        reverse("monitoring:run", args=[run.pk]),
        reverse("monitoring:run-json", args=[run.pk]),
        reverse("monitoring:run-events", args=[run.pk]),
    ]


def test_monitoring_pages_and_json_need_view_run(client, run, quiet_broker):
    for url in _reading_urls(run):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), url

    client.force_login(user_with())
    for url in _reading_urls(run):
        assert client.get(url).status_code == 403, url
    data = client.get(reverse("monitoring:data"))
    assert data.json()["message"] == "You do not have permission to do this."

    client.force_login(user_with(VIEW, staff=False))  # the permission without staff is not enough
    assert client.get(reverse("monitoring:dashboard")).status_code == 403

    client.force_login(user_with(VIEW))
    for url in _reading_urls(run):
        assert client.get(url).status_code == 200, url


def test_operator_actions_need_operate_run(client, run, no_enqueue, django_capture_on_commit_callbacks):
    url = reverse("monitoring:run-action", args=[run.pk, "requeue"])
    client.force_login(user_with(VIEW))
    for action in ("requeue", "cancel", "retry"):
        assert client.post(reverse("monitoring:run-action", args=[run.pk, action])).status_code == 403
    run.refresh_from_db()
    assert run.status == "running" and not run.cancel_requested and no_enqueue == []

    client.force_login(user_with(OPERATE))
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(url).status_code == 302
    assert Run.objects.get(pk=run.pk).status == "queued" and no_enqueue == [str(run.pk)]


def test_run_admin_actions_need_operate_run(client, run, no_enqueue):
    client.force_login(user_with(VIEW))
    changelist = reverse("admin:conversations_run_changelist")
    page = client.get(changelist).content.decode()
    assert "requeue_runs" not in page and "cancel_runs" not in page
    for action in ("requeue_runs", "cancel_runs"):
        client.post(changelist, {"action": action, "_selected_action": [run.pk]})
    run.refresh_from_db()
    assert run.status == "running" and not run.cancel_requested

    client.force_login(user_with(VIEW, OPERATE))
    response = client.post(changelist, {"action": "cancel_runs", "_selected_action": [run.pk]}, follow=True)
    assert "Cancelled 1 run(s)." in response.content.decode()


def test_the_try_page_needs_the_permission_to_start_runs(client, no_enqueue):
    agent = make_agent()
    client.force_login(user_with(VIEW))
    assert client.get(reverse("monitoring:try")).status_code == 403
    response = client.post(reverse("monitoring:try-send"), {"agent": agent.pk, "content": "hi"})
    assert response.status_code == 403 and response.json()["message"]
    assert not Run.objects.exists()

    client.force_login(user_with(VIEW, ADD))
    assert client.get(reverse("monitoring:try")).status_code == 200
    assert client.post(reverse("monitoring:try-send"), {"agent": agent.pk, "content": "hi"}).status_code == 201


def _someone_elses_conversation():
    owner = user_with(staff=False)
    conversation = Conversation.objects.create(agent=make_agent(), owner=owner)
    return owner, conversation


def test_a_staff_token_does_not_read_other_users_conversations_without_the_permission(no_enqueue):
    _, conversation = _someone_elses_conversation()
    run = ledger_run(conversation.agent, status="running", stop_reason="")
    Run.objects.filter(pk=run.pk).update(conversation=conversation)
    api = client_for(user_with())
    assert api.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 404
    assert api.get("/api/v1/conversations/").json()["count"] == 0
    assert api.get(f"/api/v1/runs/{run.pk}/").status_code == 404
    assert (
        api.post(f"/api/v1/conversations/{conversation.pk}/messages/", {"content": "hi"}, format="json").status_code
        == 404
    )
    assert api.post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 404
    assert not Message.objects.filter(conversation=conversation).exists()
    assert not Run.objects.get(pk=run.pk).cancel_requested


def test_staff_who_may_read_others_conversations_may_not_post_or_cancel_in_them(no_enqueue):
    _, conversation = _someone_elses_conversation()
    run = ledger_run(conversation.agent, status="running", stop_reason="")
    Run.objects.filter(pk=run.pk).update(conversation=conversation)
    api = client_for(user_with("conversations.view_conversation", VIEW))
    assert api.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 200
    posted = api.post(f"/api/v1/conversations/{conversation.pk}/messages/", {"content": "hi"}, format="json")
    assert posted.status_code == 403
    assert posted.json() == {
        "message": "This conversation belongs to another user; you may read it but not post in it.",
        "extra": {},
    }
    assert not Message.objects.filter(conversation=conversation).exists() and no_enqueue == []
    cancelled = api.post(f"/api/v1/runs/{run.pk}/cancel/")
    assert cancelled.status_code == 403 and "not cancel it" in cancelled.json()["message"]
    assert not Run.objects.get(pk=run.pk).cancel_requested


def test_a_token_loses_staff_reach_when_its_user_loses_staff_or_is_deactivated():
    _, conversation = _someone_elses_conversation()
    staff = user_with("conversations.view_conversation")
    api = client_for(staff)
    assert api.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 200
    staff.is_staff = False
    staff.save()
    assert api.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 404
    staff.is_active = False
    staff.save()
    assert api.get("/api/v1/conversations/").status_code == 401


def _pending_approval(conversation) -> Approval:
    run = ledger_run(conversation.agent, status="awaiting_approval", stop_reason="")
    Run.objects.filter(pk=run.pk).update(conversation=conversation)
    call = ledger_call(run, started_at=timezone.now())
    invocation = ToolInvocation.objects.create(
        run=run,
        llm_call=call,
        tool_call_id="call_1",
        tool_name="test-counter",
        arguments={"label": "x"},
        raw_arguments=json.dumps({"label": "x"}),
        status="awaiting_approval",
    )
    return Approval.objects.create(
        run=run, invocation=invocation, tool_call_id="call_1", arguments={"label": "x"}, arguments_hash="h"
    )


def test_staff_without_approval_permissions_cannot_see_or_decide_others_approvals():
    _, conversation = _someone_elses_conversation()
    approval = _pending_approval(conversation)
    api = client_for(user_with())
    assert api.get(f"/api/v1/approvals/{approval.pk}/").status_code == 404
    assert (
        api.post(f"/api/v1/approvals/{approval.pk}/decision/", {"decision": "approve"}, format="json").status_code
        == 404
    )
    assert Approval.objects.get(pk=approval.pk).status == "pending"

    reader = client_for(user_with("conversations.view_approval"))
    assert reader.get(f"/api/v1/approvals/{approval.pk}/").status_code == 200
    assert (
        reader.post(f"/api/v1/approvals/{approval.pk}/decision/", {"decision": "approve"}, format="json").status_code
        == 403
    )
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_staff_cannot_reach_an_agent_restricted_to_a_group_they_are_not_in(client):
    """Being staff is not a pass to every agent: neither the API nor the try page offers an
    agent shared with a group the operator is not in; a superuser still reaches it."""
    make_agent(slug="ledger", name="Ledger").allowed_groups.set([Group.objects.create(name="finance")])
    staff = user_with(VIEW, ADD)
    response = client_for(staff).post("/api/v1/conversations/", {"agent": "ledger"}, format="json")
    assert response.status_code == 400
    client.force_login(staff)
    page = client.get(reverse("monitoring:try"))
    assert page.status_code == 200 and b"Ledger" not in page.content
    root = user_with(superuser=True)
    assert client_for(root).post("/api/v1/conversations/", {"agent": "ledger"}, format="json").status_code == 201


def test_the_operators_group_carries_exactly_the_operator_permissions(client, run, quiet_broker, no_enqueue):
    """One step makes an on-call operator: membership of Operators (ensured after every migrate)
    opens the monitoring pages, the run actions and the try page, and nothing else."""
    operator = user_with()
    operator.groups.add(Group.objects.get(name="Operators"))
    client.force_login(operator)
    for url in _reading_urls(run):
        assert client.get(url).status_code == 200, url
    assert client.get(reverse("monitoring:try")).status_code == 200
    assert client.post(reverse("monitoring:run-action", args=[run.pk, "cancel"])).status_code == 302
    run.refresh_from_db()
    assert run.cancel_requested or run.status == "cancelled"
    assert not operator.has_perm("conversations.decide_approval")
    assert not operator.has_perm("tools.change_mcpserver")
