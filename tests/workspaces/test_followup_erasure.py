"""Forgetting an end user is confined to the workspace the person asking acts in: a token of A
forgets only A's conversations, runs, memories and copies of them, never B's, and its erasure
row names A; a superuser acting installation-wide still forgets them everywhere."""

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from rest_framework.test import APIClient

from conversations.end_users import EndUser
from conversations.models import Conversation, EndUserErasure, Message, Run
from conversations.tokens import api_token_create
from memory.forget import end_user_forget
from memory.models import Memory, MemoryChange
from tests.support.factories import AgentFactory, ModelConfigFactory, make_user
from tests.support.ledger import ledger_run
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db

END_USER = "eu-77"


def _agent(workspace: Workspace, tag: str):
    model = ModelConfigFactory(workspace=workspace, name=f"model-{tag}")
    return AgentFactory(workspace=workspace, model_config=model, slug=f"agent-{tag}")


def _theirs(agent, owner, secret: str) -> Run:
    """A conversation of the end user with the agent, a run of it, a fork of that run, and a
    memory about them, each holding `secret`."""
    run = ledger_run(agent)
    Conversation.objects.filter(pk=run.conversation_id).update(owner=owner, end_user=END_USER, title=secret)
    Message.objects.create(conversation_id=run.conversation_id, run=run, role="user", content=secret, order=1)
    fork = ledger_run(agent, forked_from=run)
    Message.objects.create(conversation_id=fork.conversation_id, run=fork, role="user", content=secret, order=1)
    memory = Memory.objects.create(
        workspace=agent.workspace,
        scope=f"agent:{agent.pk}",
        owner=owner,
        end_user=END_USER,
        kind="fact",
        statement=secret,
    )
    MemoryChange.objects.create(
        workspace=agent.workspace,
        memory=memory,
        scope=memory.scope,
        owner=owner,
        end_user=END_USER,
        action="add",
        source="api",
    )
    return run


@pytest.fixture
def two():
    a = Workspace.objects.create(name="Alpha", slug="alpha")
    b = Workspace.objects.create(name="Bravo", slug="bravo")
    owner = make_user()
    membership_set(user=owner, workspace=a, role=Role.OWNER)
    membership_set(user=owner, workspace=b, role=Role.OWNER)
    _theirs(_agent(a, "alpha"), owner, "ALPHA-SECRET")
    _theirs(_agent(b, "bravo"), owner, "BRAVO-SECRET")
    return a, b, owner


def _held(secret: str) -> dict:
    return {
        "messages": Message.objects.filter(content=secret).count(),
        "conversations": Conversation.objects.filter(title=secret).count(),
        "memories": Memory.objects.filter(statement=secret).count(),
        "changes": MemoryChange.objects.filter(end_user=END_USER, memory__statement=secret).count(),
    }


def test_a_token_forgets_its_workspaces_end_user_only(two):
    a, b, owner = two
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=owner, name='a', workspace=a)[1]}")

    response = client.delete(f"/api/v1/end-users/{END_USER}/")
    assert response.status_code == 200, response.content
    assert _held("ALPHA-SECRET") == {"messages": 0, "conversations": 0, "memories": 0, "changes": 0}
    # B's conversation, its fork, its memory and its audit trail are untouched.
    assert _held("BRAVO-SECRET") == {"messages": 2, "conversations": 1, "memories": 1, "changes": 1}
    assert Conversation.objects.filter(end_user=END_USER, agent__workspace=b).count() == 1
    erasure = EndUserErasure.objects.get()
    assert erasure.workspace == a and erasure.counts["runs_anonymised"] == 2
    assert erasure.counts["forked_runs_anonymised"] == 1 and erasure.counts["memories_deleted"] == 1

    # Nothing of theirs is left in A: a 404, though B still has them.
    assert client.delete(f"/api/v1/end-users/{END_USER}/").status_code == 404
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=owner, name='b', workspace=b)[1]}")
    assert client.delete(f"/api/v1/end-users/{END_USER}/").status_code == 200
    assert _held("BRAVO-SECRET") == {"messages": 0, "conversations": 0, "memories": 0, "changes": 0}
    assert EndUserErasure.objects.filter(workspace=b).count() == 1


def test_a_superuser_installation_wide_forgets_everywhere(two):
    _a, _b, owner = two
    root = User.objects.create_superuser(username="root", password="pw")
    erasure = end_user_forget(person=EndUser(owner.pk, END_USER), requested_by=root, channel="admin")
    assert erasure.workspace is None and erasure.counts["conversations_anonymised"] == 4
    for secret in ("ALPHA-SECRET", "BRAVO-SECRET"):
        assert _held(secret) == {"messages": 0, "conversations": 0, "memories": 0, "changes": 0}


def test_the_admin_action_forgets_in_the_workspace_chosen_and_lists_its_erasures_only(client, two):
    a, b, owner = two
    operator = make_user(staff=True)
    membership_set(user=operator, workspace=a, role=Role.OWNER)
    membership_set(user=operator, workspace=b, role=Role.OWNER)
    client.force_login(operator)
    session = client.session
    session["workspace_id"] = a.pk
    session.save()
    conversation = Conversation.objects.get(title="ALPHA-SECRET")
    changelist = reverse("admin:conversations_conversation_changelist")
    selected = {"action": "forget_end_user", "_selected_action": [conversation.pk]}
    page = client.post(changelist, selected)
    assert page.status_code == 200
    # The confirmation counts what is forgotten here: one conversation, its run and its fork's.
    assert [(p["conversations"], p["runs"]) for p in page.context["end_users"]] == [(1, 2)]
    client.post(changelist, {**selected, "apply": "1"})
    assert _held("ALPHA-SECRET")["messages"] == 0 and _held("BRAVO-SECRET")["messages"] == 2
    erasure = EndUserErasure.objects.get()
    assert erasure.workspace == a and erasure.channel == "admin"

    other = EndUserErasure.objects.create(workspace=b, end_user_digest="b" * 64, requested_by_username="zulu-eraser")
    erasures = client.get(reverse("admin:conversations_endusererasure_changelist")).content.decode()
    assert "zulu-eraser" not in erasures and operator.username in erasures
    assert client.get(reverse("admin:conversations_endusererasure_change", args=[other.pk])).status_code == 404
    assert client.get(reverse("admin:conversations_endusererasure_change", args=[erasure.pk])).status_code == 200
