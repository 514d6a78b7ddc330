"""The approval queue page (server-rendered) and the admin's decide actions."""

import json
import re

import pytest
from django.test import Client

from conversations.models import Approval, RunEvent
from engine.loop import run_advance
from tests.approvals.conftest import counter_steps


@pytest.fixture
def pending(scenario, enqueued, owner):
    s = scenario(steps=counter_steps("invoice-42"), owner=owner)
    run = s.post("Please pay invoice 42 to ACME.")
    run_advance(run_id=run.pk)
    return Approval.objects.get(run=run)


def _signed_in(user, *, csrf=False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def _csrf(client: Client, url: str = "/approvals/") -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get(url).content.decode()).group(1)


def test_sign_in_is_required_and_only_approvers_get_in(pending, owner, approver):
    response = Client().get("/approvals/")
    assert response.status_code == 302 and response.url == "/approvals/login/?next=/approvals/"

    client = Client()
    response = client.post(
        "/approvals/login/?next=/approvals/",
        {"username": "approver", "password": "approver-pass-1", "next": "/approvals/"},
    )
    assert response.status_code == 302 and response.url == "/approvals/"
    assert client.get("/approvals/").status_code == 200

    response = _signed_in(owner).get("/approvals/")
    assert response.status_code == 403 and b"Not an approver" in response.content


def test_queue_shows_what_the_approver_needs(pending, approver):
    page = _signed_in(approver).get("/approvals/").content.decode()
    assert f'data-approval-id="{pending.pk}"' in page
    assert "test-counter" in page and pending.run.agent.name in page
    assert "Please pay invoice 42 to ACME." in page  # conversation excerpt
    assert "Records that it ran" in page  # tool description
    assert "{\n  &quot;label&quot;: &quot;invoice-42&quot;\n}" in page  # pretty-printed arguments
    assert "Asked because: policy: always" in page
    assert "left</time>" in page and 'data-expires="' in page


def test_queue_filters_by_agent_and_tool(pending, approver, scenario, enqueued):
    other = scenario(
        steps=[{"tool_calls": [{"name": "test-echo", "arguments": {"text": "hi"}}]}, {"content": "ok"}],
        approval={"test-echo": "always"},
    )
    run = other.post()
    run_advance(run_id=run.pk)
    other_approval = Approval.objects.get(run=run)
    client = _signed_in(approver)

    def shown(query: str) -> set[int]:
        return {
            int(i) for i in re.findall(r'data-approval-id="(\d+)"', client.get(f"/approvals/{query}").content.decode())
        }

    assert shown("") == {pending.pk, other_approval.pk}
    assert shown("?tool=test-echo") == {other_approval.pk}
    assert shown(f"?agent={pending.run.agent.slug}") == {pending.pk}
    assert shown(f"?agent={pending.run.agent.slug}&tool=test-echo") == set()


def test_decisions_need_the_csrf_token(pending, approver):
    client = _signed_in(approver, csrf=True)
    response = client.post(f"/approvals/{pending.pk}/decision/", {"decision": "approve"})
    assert response.status_code == 403
    assert Approval.objects.get(pk=pending.pk).status == "pending"
    assert client.post(f"/approvals/{pending.pk}/preview/", "{}", content_type="application/json").status_code == 403


# Commits: a decision hands the run back to the broker in an on_commit callback, which the test follows.
@pytest.mark.django_db(transaction=True)
def test_edit_then_approve_from_the_page(pending, approver, enqueued):
    client = _signed_in(approver, csrf=True)
    token = _csrf(client)
    url = f"/approvals/{pending.pk}/decision/"

    response = client.post(
        url,
        {
            "csrfmiddlewaretoken": token,
            "decision": "approve",
            "arguments": '{"label": 1',
            "arguments_hash": pending.arguments_hash,
            "next": "/approvals/",
        },
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "Not valid JSON" in page and "{&quot;label&quot;: 1</textarea>" in page  # what was typed is kept

    response = client.post(
        url,
        {
            "csrfmiddlewaretoken": token,
            "decision": "approve",
            "arguments": '{"label": 1}',
            "arguments_hash": pending.arguments_hash,
            "next": "/approvals/",
        },
    )
    assert response.status_code == 400 and "is not of type" in response.content.decode()

    response = client.post(
        url,
        {
            "csrfmiddlewaretoken": token,
            "decision": "approve",
            "arguments": '{"label": "invoice-43"}',
            "arguments_hash": pending.arguments_hash,
            "next": "/approvals/?tool=test-counter",
        },
    )
    assert response.status_code == 302 and response.url == "/approvals/?tool=test-counter"
    pending.refresh_from_db()
    assert (pending.status, pending.channel, pending.decided_by) == ("approved", "page", approver)
    assert pending.arguments == {"label": "invoice-43"}
    assert str(pending.run_id) in enqueued
    assert "Approved #%d test-counter with your edits." % pending.pk in client.get(response.url).content.decode()


def test_a_nul_character_in_a_page_decision_is_refused(pending, approver):
    client = _signed_in(approver)
    url = f"/approvals/{pending.pk}/decision/"
    response = client.post(url, {"decision": "reject", "reason": "no\x00pe"})
    assert response.status_code == 400 and "NUL character" in response.content.decode()
    response = client.post(url, {"decision": "approve", "arguments": '{"label": "a\\u0000b"}'})
    assert response.status_code == 400 and "NUL character" in response.content.decode()
    pending.refresh_from_db()
    assert pending.status == "pending"


def test_a_late_second_decision_is_explained(pending, approver):
    client = _signed_in(approver)
    client.post(f"/approvals/{pending.pk}/decision/", {"decision": "reject", "reason": "duplicate"})
    response = client.post(f"/approvals/{pending.pk}/decision/", {"decision": "approve"}, follow=True)
    assert "already rejected (by approver)" in response.content.decode()
    assert RunEvent.objects.filter(run=pending.run, type="approval.decided").count() == 1


def test_poll_returns_the_cards_that_are_pending(pending, approver):
    client = _signed_in(approver)
    body = client.get("/approvals/poll/?tool=test-counter").json()
    assert body["count"] == 1 and body["cards"][0]["id"] == pending.pk
    # Forms inside polled cards come back to the queue, with its filters.
    assert 'name="next" value="/approvals/?tool=test-counter"' in body["cards"][0]["html"]
    client.post(f"/approvals/{pending.pk}/decision/", {"decision": "approve"})
    assert client.get("/approvals/poll/").json() == {"count": 0, "cards": []}


def test_preview_validates_and_shows_the_difference(pending, approver):
    client = _signed_in(approver)
    url = f"/approvals/{pending.pk}/preview/"
    body = client.post(url, json.dumps({"label": "invoice-43"}), content_type="application/json").json()
    assert body["ok"] is True and body["errors"] == []
    assert ["removed", '  "label": "invoice-42"'] in body["diff"] and ["added", '  "label": "invoice-43"'] in body[
        "diff"
    ]
    body = client.post(url, json.dumps({"label": "x", "amount": 3}), content_type="application/json").json()
    assert body["ok"] is False and "amount" in body["errors"][0]
    body = client.post(url, "{oops", content_type="application/json").json()
    assert body["ok"] is False and body["errors"][0].startswith("Not valid JSON")


def test_history_shows_decided_approvals_with_their_edits(pending, approver):
    client = _signed_in(approver)
    client.post(f"/approvals/{pending.pk}/decision/", {"decision": "approve", "arguments": '{"label": "invoice-43"}'})
    assert f'data-approval-id="{pending.pk}"' not in client.get("/approvals/").content.decode()
    page = client.get("/approvals/history/").content.decode()
    assert f'data-approval-id="{pending.pk}"' in page
    assert "by <strong>approver</strong>" in page and "via approval page" in page
    assert '<span class="removed">-   &quot;label&quot;: &quot;invoice-42&quot;</span>' in page
    assert '<span class="added">+   &quot;label&quot;: &quot;invoice-43&quot;</span>' in page
    assert f'data-approval-id="{pending.pk}"' not in client.get("/approvals/history/?status=rejected").content.decode()

    pending.refresh_from_db()
    detail = client.get(f"/approvals/{pending.pk}/").content.decode()
    assert "approval.requested" in detail and "approval.decided" in detail and pending.arguments_hash in detail


def test_admin_actions_decide_with_the_admin_channel(pending, approver, scenario, enqueued):
    approver.is_staff = True
    approver.save()
    client = _signed_in(approver)
    changelist = "/admin/conversations/approval/"
    assert client.get(changelist).status_code == 200

    response = client.post(changelist, {"action": "reject_selected", "_selected_action": [pending.pk]})
    assert response.status_code == 200 and b"The reason is sent to the model" in response.content
    assert Approval.objects.get(pk=pending.pk).status == "pending"
    client.post(
        changelist,
        {"action": "reject_selected", "_selected_action": [pending.pk], "apply": "1", "reason": "Use the new invoice."},
    )
    pending.refresh_from_db()
    assert (pending.status, pending.channel, pending.reason) == ("rejected", "admin", "Use the new invoice.")

    response = client.post(changelist, {"action": "approve_selected", "_selected_action": [pending.pk]}, follow=True)
    assert "0 decided, 1 skipped (not pending)." in response.content.decode()
    page = client.get(f"{changelist}{pending.pk}/change/").content.decode()
    assert "policy: always" in page and "Use the new invoice." in page


def test_operators_set_the_policy_in_the_admin(pending, approver):
    approver.is_superuser = approver.is_staff = True
    approver.save()
    client = _signed_in(approver)
    tool = pending.invocation.tool
    page = client.get(f"/admin/tools/tooldefinition/{tool.pk}/change/").content.decode()
    assert 'name="approval_policy"' in page and 'name="approval_rule"' in page
    assert 'name="approval_timeout_seconds"' in page and 'name="approval_on_expiry"' in page
    page = client.get(f"/admin/agents/agent/{pending.run.agent_id}/change/").content.decode()
    assert 'name="agent_tools-0-approval_rule"' in page and 'value="rule"' in page
