"""Approval emails go to the workspace's approvers only: of an email webhook's addresses, those of
active members of the run's agent's workspace who may decide its approvals (owner, operator,
approver, or the custom role with the permission); another workspace's approver, a viewer, a
builder and a stranger are left out, and a delivery with nobody left fails and says why."""

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core import mail

from conversations.models import Approval
from notifications.models import Webhook, WebhookDelivery
from notifications.sending import webhook_attempt
from tests.support.runs import advance, start_run
from workspaces.defaults import default_workspace_id
from workspaces.membership import approver_emails, membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

SCRIPT = {
    "scenarios": [
        {
            "match": ".",
            "steps": [{"tool_calls": [{"name": "test-counter", "arguments": {"label": "x"}}]}, {"content": "done"}],
        }
    ]
}


def person(name: str, workspace, role: str, **fields) -> User:
    user = User.objects.create_user(name, email=f"{name}@example.com", **fields)
    membership_set(user=user, workspace=workspace, role=role)
    return user


@pytest.fixture
def people(db):
    alpha = Workspace.objects.get(pk=default_workspace_id())
    bravo = Workspace.objects.create(name="Bravo", slug="bravo")
    for name, role in [
        ("owner", Role.OWNER),
        ("operator", Role.OPERATOR),
        ("approver", Role.APPROVER),
        ("viewer", Role.VIEWER),
        ("builder", Role.BUILDER),
        ("plain", Role.CUSTOM),
    ]:
        person(name, alpha, role)
    person("gone", alpha, Role.APPROVER, is_active=False)
    person("other", bravo, Role.APPROVER)
    direct = person("direct", alpha, Role.CUSTOM)
    direct.user_permissions.add(
        Permission.objects.get(content_type__app_label="conversations", codename="decide_approval")
    )
    grouped = person("grouped", alpha, Role.CUSTOM)
    grouped.groups.add(Group.objects.get(name="Approvers"))
    return alpha, bravo


def test_the_approvers_of_a_workspace_are_its_deciding_members(people):
    alpha, bravo = people
    assert approver_emails(workspace_id=alpha.pk) == {
        f"{name}@example.com" for name in ("owner", "operator", "approver", "direct", "grouped")
    }
    assert approver_emails(workspace_id=bravo.pk) == {"other@example.com"}


def test_an_approval_email_reaches_the_workspace_s_approvers_only(scripted_agent, people):
    alpha, bravo = people
    agent = scripted_agent(SCRIPT, tools=["test-counter"], approval={"test-counter": "always"}, workspace=alpha)
    addresses = ["Approver@example.com", "viewer@example.com", "other@example.com", "stranger@example.com"]
    Webhook.objects.create(agent=agent, format="email", email_to=",\n".join(addresses), secret="whsec_mail")
    run = advance(start_run(agent, "record"))
    assert run.status == "awaiting_approval", run.error
    [delivery] = WebhookDelivery.objects.filter(run_event__run=run, event_type="approval.requested")
    assert webhook_attempt(delivery_id=delivery.pk) is None
    [email] = mail.outbox
    assert email.to == ["Approver@example.com"]
    assert Approval.objects.filter(run=run).exists()


def test_with_no_approver_among_the_addresses_the_delivery_fails_and_says_why(scripted_agent, people):
    alpha, bravo = people
    agent = scripted_agent(SCRIPT, tools=["test-counter"], approval={"test-counter": "always"}, workspace=alpha)
    Webhook.objects.create(agent=agent, format="email", email_to="other@example.com", secret="whsec_mail")
    run = advance(start_run(agent, "record"))
    [delivery] = WebhookDelivery.objects.filter(run_event__run=run, event_type="approval.requested")
    webhook_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert not mail.outbox
    assert delivery.status == "failed"
    assert "may decide" in delivery.attempt_rows.get().error
