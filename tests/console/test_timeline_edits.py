"""Honest pages: a run's timeline shows the arguments a tool really ran with when an approver
edited them (both sets and the diff), and the try page's poll says what a parked run waits for."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

from conversations.models import Approval, ToolInvocation
from engine.approvals import approval_decide
from tests.approvals.conftest import counter_steps
from tests.support.llm import agent_on
from tests.support.runs import advance, start_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def approver(db):
    user = get_user_model().objects.create_user("approver", password="pw")
    user.groups.add(Group.objects.get(name="Approvers"))
    return user


@pytest.fixture
def operator(client, db):
    user = get_user_model().objects.create_user("oncall", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Operators"))
    client.force_login(user)
    return user


def _parked_run(fake_llm):
    agent = agent_on(
        fake_llm,
        {"scenarios": [{"match": ".", "steps": counter_steps("refund-90", reply="Done: {last_tool_result}")}]},
        tools=["test-counter"],
    )
    run = advance(start_run(agent, "Refund order 7, please."))
    assert run.status == "awaiting_approval"
    return run


def test_the_timeline_shows_both_argument_sets_and_the_diff_of_an_edited_approval(
    fake_llm, no_enqueue, executions, approver, operator, client
):
    run = _parked_run(fake_llm)
    approval = Approval.objects.get(run=run)
    approval_decide(
        approval_id=approval.pk, user=approver, decision="approve", channel="page", arguments={"label": "refund-50"}
    )
    run = advance(run)
    assert run.status == "completed" and executions("refund-50") == 1 and executions("refund-90") == 0

    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    steps = page.split('id="steps"')[1].split("</table>")[0]
    assert "arguments the model asked for" in steps and "arguments the tool ran with" in steps
    assert "edited by approver" in steps and "approval approved with edited arguments by approver" in steps
    asked = steps.split("arguments the model asked for")[1].split("</pre>")[0]
    ran = steps.split("arguments the tool ran with")[1].split("</pre>")[0]
    assert "refund-90" in asked and "refund-50" not in asked
    assert "refund-50" in ran and "refund-90" not in ran
    diff = steps.split('class="diff-lines"')[1].split("</pre>")[0]
    assert '<span class="removed">-   &quot;label&quot;: &quot;refund-90&quot;</span>' in diff
    assert '<span class="added">+   &quot;label&quot;: &quot;refund-50&quot;</span>' in diff

    data = client.get(reverse("monitoring:run-json", args=[run.pk])).json()
    [tool] = [step for step in data["steps"] if step["kind"] == "tool_invocation"]
    assert tool["arguments"] == {"label": "refund-90"}
    assert tool["approval"]["arguments"] == {"label": "refund-50"} and tool["approval"]["edited"] is True

    operator.is_superuser = True
    operator.save()
    change = client.get(reverse("admin:conversations_run_change", args=[run.pk])).content.decode()
    assert "arguments the tool ran with" in change and '<span class="added">' in change


def test_an_approval_without_edits_shows_one_set_of_arguments(fake_llm, no_enqueue, approver, operator, client):
    run = _parked_run(fake_llm)
    approval_decide(approval_id=Approval.objects.get(run=run).pk, user=approver, decision="approve", channel="page")
    run = advance(run)

    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    assert "arguments the tool ran with" not in page and "diff-lines" not in page
    assert client.get(reverse("monitoring:run-json", args=[run.pk])).json()["steps"][1]["approval"]["edited"] is False


def test_the_try_page_poll_names_the_approval_a_run_waits_for_and_says_its_status_in_words(
    fake_llm, no_enqueue, approver, operator, client
):
    run = _parked_run(fake_llm)
    approval = Approval.objects.get(run=run)
    url = reverse("monitoring:run-events", args=[run.pk])

    data = client.get(url).json()
    assert data["run"]["status"] == "awaiting_approval" and data["run"]["status_text"] == "waiting for approval"
    # This operator may not decide: the approval is named, without a link that would refuse them.
    assert data["pending_approvals"] == [{"id": approval.pk, "tool": "test-counter", "url": None}]

    operator.groups.add(Group.objects.get(name="Approvers"))
    data = client.get(url, {"after": data["events"][-1]["seq"]}).json()
    assert data["events"] == []
    assert data["pending_approvals"] == [
        {"id": approval.pk, "tool": "test-counter", "url": reverse("approvals:detail", args=[approval.pk])}
    ]
    assert client.get(data["pending_approvals"][0]["url"]).status_code == 200

    approval_decide(approval_id=approval.pk, user=approver, decision="reject", channel="page", reason="no")
    run = advance(run)
    data = client.get(url).json()
    assert data["pending_approvals"] == [] and data["run"]["status_text"] == "completed"
    assert data["run"]["stop_reason_text"] == "final answer"
    assert ToolInvocation.objects.get(run=run).status == "rejected"
