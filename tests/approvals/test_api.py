"""/api/v1/approvals/: who sees what, decisions, conflicts and errors in the API's one shape."""

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from conversations.models import Approval
from conversations.tokens import api_token_create
from engine.loop import run_advance
from tests.approvals.conftest import counter_steps


def _client(user) -> APIClient:
    client = APIClient()
    _, token = api_token_create(user=user, name="test")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def parked(scenario, enqueued, owner):
    """Two parked runs: one in `owner`'s conversation, one in a stranger's."""
    mine = scenario(steps=counter_steps("mine"), owner=owner)
    theirs = scenario(steps=counter_steps("theirs"), owner=User.objects.create_user("stranger"))
    runs = [mine.post(), theirs.post()]
    for run in runs:
        run_advance(run_id=run.pk)
    return {"mine": Approval.objects.get(run=runs[0]), "theirs": Approval.objects.get(run=runs[1])}


def test_approvers_list_pending_approvals(parked, approver):
    client = _client(approver)
    body = client.get("/api/v1/approvals/", {"status": "pending"}).json()
    assert body["count"] == 2
    first = body["results"][0]
    assert first["id"] == parked["mine"].pk and first["tool"] == "test-counter"
    assert first["arguments"] == first["original_arguments"] == {"label": "mine"}
    assert first["tool_call_id"] == parked["mine"].tool_call_id and first["status"] == "pending"
    assert first["why"] == "policy: always" and first["expires_at"] and first["decided_by"] is None

    client.post(f"/api/v1/approvals/{parked['mine'].pk}/decision/", {"decision": "approve"}, format="json")
    assert [a["id"] for a in client.get("/api/v1/approvals/?status=pending").json()["results"]] == [parked["theirs"].pk]
    assert [a["id"] for a in client.get("/api/v1/approvals/?status=decided").json()["results"]] == [parked["mine"].pk]
    assert client.get("/api/v1/approvals/?tool=test-echo").json()["count"] == 0


def test_others_see_only_their_own_conversations_and_cannot_decide(parked, owner):
    client = _client(owner)
    assert [a["id"] for a in client.get("/api/v1/approvals/").json()["results"]] == [parked["mine"].pk]
    assert client.get(f"/api/v1/approvals/{parked['theirs'].pk}/").status_code == 404
    response = client.post(f"/api/v1/approvals/{parked['theirs'].pk}/decision/", {"decision": "approve"}, format="json")
    assert response.status_code == 404

    response = client.post(f"/api/v1/approvals/{parked['mine'].pk}/decision/", {"decision": "approve"}, format="json")
    assert response.status_code == 403
    assert response.json() == {"message": "You are not allowed to decide approvals.", "extra": {}}
    assert Approval.objects.get(pk=parked["mine"].pk).status == "pending"


# Commits: a decision hands the run back to the broker in an on_commit callback, which the test follows.
@pytest.mark.django_db(transaction=True)
def test_decision_then_a_second_decision_is_409(parked, approver, enqueued):
    client = _client(approver)
    approval = parked["mine"]
    response = client.post(
        f"/api/v1/approvals/{approval.pk}/decision/", {"decision": "reject", "reason": "wrong customer"}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["decided_by"], body["channel"], body["reason"]) == (
        "rejected",
        "approver",
        "api",
        "wrong customer",
    )
    assert str(approval.run_id) in enqueued

    again = client.post(f"/api/v1/approvals/{approval.pk}/decision/", {"decision": "approve"}, format="json")
    assert again.status_code == 409
    assert again.json() == {"message": "This approval is already rejected (by approver).", "extra": {}}


def test_edited_arguments_are_checked(parked, approver):
    client = _client(approver)
    url = f"/api/v1/approvals/{parked['mine'].pk}/decision/"
    response = client.post(url, {"decision": "approve", "arguments": {"label": 7}}, format="json")
    assert response.status_code == 400
    assert "label" in response.json()["message"] and "not of type 'string'" in response.json()["message"]
    response = client.post(url, {"decision": "approve", "arguments": ["label"]}, format="json")
    assert response.status_code == 400 and response.json()["message"] == "arguments: Must be a JSON object."
    response = client.post(url, {"decision": "reject", "arguments": {"label": "x"}}, format="json")
    assert response.status_code == 400
    response = client.post(url, {"decision": "maybe"}, format="json")
    assert response.status_code == 400 and response.json()["message"].startswith("decision:")
    assert client.get("/api/v1/approvals/?status=undecided").status_code == 400

    response = client.post(
        url,
        {"decision": "approve", "arguments": {"label": "fixed"}, "arguments_hash": parked["mine"].arguments_hash},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["arguments"] == {"label": "fixed"}
    assert response.json()["original_arguments"] == {"label": "mine"}


def test_malformed_filters_are_a_400_naming_the_parameter(parked, approver):
    client = _client(approver)
    response = client.get("/api/v1/approvals/", {"run": "not-a-run-id"})
    assert response.status_code == 400 and response.json()["message"] == "run: Must be a valid UUID."
    assert client.get("/api/v1/approvals/", {"agent": "a\x00b"}).status_code == 400
    mine = client.get("/api/v1/approvals/", {"run": str(parked["mine"].run_id)}).json()["results"]
    assert [a["id"] for a in mine] == [parked["mine"].pk]


def test_a_nul_character_in_edited_arguments_is_refused(parked, approver):
    response = _client(approver).post(
        f"/api/v1/approvals/{parked['mine'].pk}/decision/",
        {"decision": "approve", "arguments": {"label": "a\x00b"}},
        format="json",
    )
    assert response.status_code == 400 and "NUL character" in response.json()["message"]
    assert Approval.objects.get(pk=parked["mine"].pk).status == "pending"


def test_anonymous_requests_are_refused(parked):
    assert APIClient().get("/api/v1/approvals/").status_code == 401


def test_schema_documents_the_decision_endpoint(db):
    response = APIClient().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    paths = response.json()["paths"]
    decision = paths["/api/v1/approvals/{id}/decision/"]["post"]
    schema_name = decision["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    fields = response.json()["components"]["schemas"][schema_name]["properties"]
    assert {"decision", "arguments", "reason", "for_rest_of_run", "arguments_hash"} <= set(fields)
