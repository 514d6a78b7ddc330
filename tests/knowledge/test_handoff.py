"""A knowledge base set to hand off: nothing found parks the run in the approval queue, a
person's answer resumes it and reaches the model; no answer (rejected, expired) gives the fallback."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone
from rest_framework.test import APIClient

from conversations.models import Approval, Message, Run
from conversations.services import conversation_create
from engine.admission import message_post
from engine.tasks import approvals_expire_task
from knowledge.models import KnowledgeBase, KnowledgeSearch
from tests.knowledge.helpers import add_documents, make_base
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

FALLBACK = "Sorry, I could not find that; please contact support."
QUESTION = "Can I pay with seashells?"


def _handoff_script(tool: str) -> dict:
    """Searches once, then relays a person's answer or answers the fallback."""
    return {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {"tool_calls": [{"name": tool, "arguments": {"query": "seashell payment"}}]},
                    {
                        "branches": [
                            {
                                "if_last_tool_result_matches": r"A person answered[^\n]*\n(?P<answer>.+)",
                                "then": {"content": "{answer}"},
                            },
                            {
                                "if_last_tool_result_matches": r"nothing else:\n(?P<fallback>.+)",
                                "then": {"content": "{fallback}"},
                            },
                        ],
                        "else": {"content": "unexpected tool result"},
                    },
                ],
            }
        ]
    }


@pytest.fixture
def approver(db):
    user = User.objects.create_user("approver", password="approver-pass-1")
    user.groups.add(Group.objects.get(name="Approvers"))
    return user


@pytest.fixture
def parked(worker, fake_llm):
    """A run of an agent on a hand-off base whose search finds nothing, parked for a person."""
    owner = User.objects.create_user("owner", password="owner-pass-1")
    base = make_base(name="Payments", fallback_answer=FALLBACK, on_nothing_found=KnowledgeBase.OnNothingFound.HANDOFF)
    add_documents(base, "en-returns.md")
    KnowledgeBase.objects.filter(pk=base.pk).update(score_threshold=1000)
    model = fake_llm.script(f"kb-handoff-{owner.pk}", _handoff_script(base.search_tool.name))
    agent = make_agent(
        tools=[base.search_tool.name], model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=model)
    )
    run = message_post(conversation=conversation_create(agent=agent, owner=owner), content=QUESTION)
    wait_for(
        lambda: Run.objects.filter(pk=run.pk, status="awaiting_approval").exists(),
        timeout=60,
        message="the run to wait for a person",
    )
    return Run.objects.get(pk=run.pk), Approval.objects.get(run=run), model, owner


def _completed(run) -> Run:
    wait_for(lambda: Run.objects.get(pk=run.pk).status == "completed", timeout=60, message="the run to complete")
    return Run.objects.get(pk=run.pk)


def _reply(run) -> str:
    return Message.objects.filter(run=run, role="assistant").last().content


def test_nothing_found_parks_the_run_and_a_persons_answer_resumes_it(parked, approver, client, fake_llm):
    run, approval, model, _owner = parked
    assert approval.kind == "handoff" and approval.status == "pending"
    assert approval.invocation.status == "awaiting_approval"
    search = KnowledgeSearch.objects.get(run=run)
    assert search.fallback and search.handed_off

    api = APIClient()
    api.force_authenticate(approver)
    listed = api.get("/api/v1/approvals/", {"status": "pending"}).json()["results"]
    assert [(a["id"], a["kind"]) for a in listed] == [(approval.pk, "handoff")]
    assert "seashell payment" in listed[0]["why"] and listed[0]["arguments"] == {"query": "seashell payment"}

    client.force_login(approver)
    page = client.get("/approvals/").content.decode()
    assert "needs a person&#x27;s answer" in page and QUESTION in page and "Send the answer" in page

    # An empty answer, or edited arguments, is refused; the item stays pending.
    decision = f"/api/v1/approvals/{approval.pk}/decision/"
    empty = api.post(decision, {"decision": "approve", "reason": "  "}, format="json")
    assert empty.status_code == 400 and "reason" in empty.json()["extra"]["fields"]
    edited = api.post(decision, {"decision": "approve", "reason": "x", "arguments": {"query": "y"}}, format="json")
    assert edited.status_code == 400
    response = client.post(f"/approvals/{approval.pk}/decision/", {"decision": "approve", "reason": ""})
    assert response.status_code == 400 and "Write the answer" in response.content.decode()
    response = client.post(f"/approvals/{approval.pk}/decision/", {"decision": "approve", "reason": "y" * 2001})
    assert response.status_code == 400 and "too long" in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == "pending"

    answer = "Yes, seashells are accepted at the harbour shop."
    assert api.post(decision, {"decision": "approve", "reason": answer}, format="json").status_code == 200

    run = _completed(run)
    assert _reply(run) == answer
    last = fake_llm.requests(model)[-1]
    tool_message = [m for m in last["messages"] if m["role"] == "tool"][-1]
    assert tool_message["content"].startswith("A person answered") and answer in tool_message["content"]
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.reason) == ("approved", approver, answer)
    assert approval.decided_at is not None and approval.invocation.status == "succeeded"


def test_a_rejected_handoff_gives_the_fallback(parked, approver, client):
    run, approval, _model, _owner = parked
    client.force_login(approver)
    response = client.post(f"/approvals/{approval.pk}/decision/", {"decision": "reject"})
    assert response.status_code == 302

    run = _completed(run)
    assert _reply(run) == FALLBACK
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.decided_by == approver


def test_an_expired_handoff_gives_the_fallback(parked):
    run, approval, _model, _owner = parked
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    approvals_expire_task.delay()

    run = _completed(run)
    assert _reply(run) == FALLBACK
    assert Approval.objects.get(pk=approval.pk).status == "expired"


def test_only_an_approver_may_answer(parked, client):
    run, approval, _model, owner = parked
    api = APIClient()
    api.force_authenticate(owner)  # sees the approval of their own conversation, may not decide it
    response = api.post(
        f"/api/v1/approvals/{approval.pk}/decision/", {"decision": "approve", "reason": "yes"}, format="json"
    )
    assert response.status_code == 403
    client.force_login(owner)
    assert client.get("/approvals/").status_code == 403
    assert (
        client.post(f"/approvals/{approval.pk}/decision/", {"decision": "approve", "reason": "yes"}).status_code == 403
    )
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    assert Run.objects.get(pk=run.pk).status == "awaiting_approval"


def test_the_admins_bulk_approve_cannot_answer_a_handoff(parked, approver, client):
    run, approval, _model, _owner = parked
    approver.is_staff = True
    approver.save()
    client.force_login(approver)
    changelist = "/admin/conversations/approval/"
    response = client.post(changelist, {"action": "approve_selected", "_selected_action": [approval.pk]}, follow=True)
    assert "Write the answer the agent should give." in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    page = client.get(f"{changelist}?kind=handoff").content.decode()
    assert f"/admin/conversations/approval/{approval.pk}/change/" in page
