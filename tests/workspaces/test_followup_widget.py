"""A widget opens no conversation with an agent outside its workspace, as admission starts no run
for it: the API answers 404, as for a missing widget, and nothing is written."""

import pytest
from django.test import Client

from conversations.models import Conversation
from engine.admission import AgentOutsideWorkspace
from tests.support.factories import AgentFactory, ModelConfigFactory, make_user
from widgets.models import Widget
from widgets.services import widget_conversation_open
from widgets.tokens import end_user_token_sign
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def two():
    a = Workspace.objects.create(name="Alpha", slug="alpha")
    b = Workspace.objects.create(name="Bravo", slug="bravo")
    agent_a = AgentFactory(workspace=a, model_config=ModelConfigFactory(workspace=a, name="model-a"), slug="a-agent")
    return a, b, agent_a


def _widget(workspace, agent):
    # A row naming another workspace's agent: a fault the model's clean keeps out, refused anyway.
    return Widget.objects.create(
        workspace=workspace, agent=agent, name="w", secret="wsec_" + "c" * 40, owner=make_user()
    )


def test_a_widget_of_another_workspace_opens_no_conversation_with_the_agent(two):
    a, b, agent_a = two
    widget = _widget(b, agent_a)
    with pytest.raises(AgentOutsideWorkspace):
        widget_conversation_open(widget=widget, end_user="alice")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {end_user_token_sign(widget=widget, end_user='alice')}")
    opened = client.post(f"/api/v1/widget/{widget.pk}/conversations/", {}, content_type="application/json")
    missing = client.post("/api/v1/widget/00000000-0000-0000-0000-000000000000/conversations/", {})
    assert opened.status_code == 404 and missing.status_code in (401, 404)
    assert "a-agent" not in opened.content.decode()
    assert not Conversation.objects.exists()


def test_a_widget_of_the_agents_workspace_opens_one(two):
    a, _b, agent_a = two
    widget = _widget(a, agent_a)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {end_user_token_sign(widget=widget, end_user='alice')}")
    opened = client.post(f"/api/v1/widget/{widget.pk}/conversations/", {}, content_type="application/json")
    assert opened.status_code == 201, opened.content
    assert Conversation.objects.get().agent == agent_a
