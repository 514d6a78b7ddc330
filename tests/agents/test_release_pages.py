"""The agent's versions page, the diff of two versions, and the release actions in the admin:
seeing takes the permission to view agents, acting takes agents.publish_agent, bad input is a 400."""

import pytest

from agents.models import Agent, AgentRelease, AgentTool, ModelConfig, ReleaseAction
from agents.releases import version_publish
from tests.security.privileges import admin_form_data, user_with
from tests.support.factories import make_agent
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db

VIEW = "agents.view_agent"


@pytest.fixture
def prompted_agent():
    return make_agent(tools=["test-echo"], system_prompt="Line one.\nLine two.\nLine three.")


def _signed_in(client, *permissions):
    user = user_with(*permissions)
    client.force_login(user)
    return client, user


def _versions(agent):
    return f"/admin/agents/agent/{agent.pk}/versions/"


def _release(agent):
    return f"/admin/agents/agent/{agent.pk}/release/"


def _two_versions(agent):
    operator = user_with("agents.publish_agent")
    first = version_publish(agent=agent, user=operator, note="First.").version
    Agent.objects.filter(pk=agent.pk).update(system_prompt="Line one.\nLine 2, changed.\nLine three.", max_iterations=5)
    ModelConfig.objects.filter(pk=agent.model_config_id).update(temperature=0.2)
    AgentTool.objects.filter(agent=agent).update(approval=AgentTool.Approval.ALWAYS)
    AgentTool.objects.create(agent=agent, tool=ToolDefinition.objects.get(name="test-counter"))
    second = version_publish(agent=agent, user=operator, note="Second.").version
    return first, second


def test_the_versions_page_lists_versions_with_who_when_and_why(client, prompted_agent):
    first, second = _two_versions(prompted_agent)
    client, _ = _signed_in(client, VIEW)
    page = client.get(_versions(prompted_agent)).content.decode()
    assert 'data-version="1"' in page and 'data-version="2"' in page
    assert "First." in page and "Second." in page and "published-marker" in page
    # Without the publish permission, no action is offered.
    assert 'id="publish"' not in page and "rollback-form" not in page
    # The agent's own page links here.
    change = client.get(f"/admin/agents/agent/{prompted_agent.pk}/change/").content.decode()
    assert _versions(prompted_agent) in change


def test_the_diff_shows_prompt_lines_settings_models_and_tools(client, prompted_agent):
    _two_versions(prompted_agent)
    client, _ = _signed_in(client, VIEW)
    response = client.get(f"/admin/agents/agent/{prompted_agent.pk}/versions/diff/?a=1&b=2")
    assert response.status_code == 200
    page = response.content.decode()
    assert '<span class="del">-Line two.</span>' in page and '<span class="add">+Line 2, changed.</span>' in page
    assert 'data-field="max_iterations"' in page and 'data-field="model.temperature"' in page
    assert 'data-tool="test-counter" data-status="added"' in page
    assert 'data-tool="test-echo" data-status="changed"' in page and 'data-field="approval"' in page
    same = client.get(f"/admin/agents/agent/{prompted_agent.pk}/versions/diff/?a=2&b=2").content.decode()
    assert 'data-unchanged="true"' in same


@pytest.mark.parametrize("query", ["", "?a=1", "?a=x&b=2", "?a=1&b=99", "?a=0&b=1", "?a=1&b=" + "9" * 30])
def test_bad_diff_queries_are_a_400(client, prompted_agent, query):
    _two_versions(prompted_agent)
    client, _ = _signed_in(client, VIEW)
    assert client.get(f"/admin/agents/agent/{prompted_agent.pk}/versions/diff/{query}").status_code == 400


def test_the_pages_need_the_view_permission(client, prompted_agent):
    client, _ = _signed_in(client, "conversations.view_run")
    assert client.get(_versions(prompted_agent)).status_code == 403
    assert client.get(f"/admin/agents/agent/{prompted_agent.pk}/versions/diff/?a=1&b=1").status_code == 403
    assert client.get("/admin/agents/agent/999999/versions/").status_code in (302, 404)


def test_publishing_needs_the_publish_permission_and_a_post(client, prompted_agent):
    client, _ = _signed_in(client, VIEW, "agents.change_agent")
    assert client.post(_release(prompted_agent), {"action": "publish", "note": "Go."}).status_code == 403
    assert not AgentRelease.objects.exists()
    client, _ = _signed_in(client, VIEW, "agents.publish_agent")
    assert client.get(_release(prompted_agent)).status_code == 405


def test_publish_then_roll_back_from_the_page(client, prompted_agent):
    client, user = _signed_in(client, VIEW, "agents.publish_agent")
    response = client.post(_release(prompted_agent), {"action": "publish", "note": "First."})
    assert response.status_code == 302
    Agent.objects.filter(pk=prompted_agent.pk).update(system_prompt="Changed.")
    client.post(_release(prompted_agent), {"action": "publish", "note": "Second."})
    page = client.get(_versions(prompted_agent)).content.decode()
    assert "rollback-form" in page
    assert client.post(_release(prompted_agent), {"action": "rollback", "version": "1"}).status_code == 302
    prompted_agent.refresh_from_db()
    assert prompted_agent.published_version.number == 1
    assert list(AgentRelease.objects.order_by("pk").values_list("action", "user")) == [
        (ReleaseAction.PUBLISH, user.pk),
        (ReleaseAction.PUBLISH, user.pk),
        (ReleaseAction.ROLLBACK, user.pk),
    ]


def test_a_canary_from_the_page(client, prompted_agent):
    client, _ = _signed_in(client, VIEW, "agents.publish_agent")
    client.post(_release(prompted_agent), {"action": "publish", "note": "First."})
    Agent.objects.filter(pk=prompted_agent.pk).update(system_prompt="Candidate.")
    assert (
        client.post(_release(prompted_agent), {"action": "canary_start", "percent": "20", "note": "Try."}).status_code
        == 302
    )
    page = client.get(_versions(prompted_agent)).content.decode()
    assert "canary-marker" in page and 'id="canary-promote"' in page
    assert client.post(_release(prompted_agent), {"action": "canary_promote"}).status_code == 302
    prompted_agent.refresh_from_db()
    assert prompted_agent.published_version.number == 2 and prompted_agent.canary_version is None


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"action": "explode"},
        {"action": "publish"},  # no note
        {"action": "publish", "note": "x" * 2001},
        {"action": "rollback"},
        {"action": "rollback", "version": "99"},
        {"action": "rollback", "version": "abc"},
        {"action": "canary_start", "note": "x"},
        {"action": "canary_start", "note": "x", "percent": "100"},
        {"action": "canary_start", "note": "x", "percent": "0"},
        {"action": "canary_promote"},
        {"action": "canary_abort"},
    ],
)
def test_bad_release_posts_are_a_400_and_change_nothing(client, prompted_agent, data):
    client, _ = _signed_in(client, VIEW, "agents.publish_agent")
    client.post(_release(prompted_agent), {"action": "publish", "note": "First."})
    before = AgentRelease.objects.count()
    Agent.objects.filter(pk=prompted_agent.pk).update(system_prompt="Changed.")
    response = client.post(_release(prompted_agent), data)
    assert response.status_code == 400, data
    assert AgentRelease.objects.count() == before


def test_release_rows_are_read_only_in_the_admin(client, prompted_agent):
    operator = user_with("agents.publish_agent")
    release = version_publish(agent=prompted_agent, user=operator, note="First.")
    client, _ = _signed_in(
        client, "agents.view_agentrelease", "agents.change_agentrelease", "agents.delete_agentrelease"
    )
    listing = client.get("/admin/agents/agentrelease/")
    assert listing.status_code == 200 and "First." in listing.content.decode()
    assert client.get(f"/admin/agents/agentrelease/{release.pk}/change/").status_code == 200
    assert client.post(f"/admin/agents/agentrelease/{release.pk}/change/", {"note": "Rewritten."}).status_code == 403
    assert client.post(f"/admin/agents/agentrelease/{release.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.get("/admin/agents/agentrelease/add/").status_code == 403
    release.refresh_from_db()
    assert release.note == "First."


def test_saving_the_draft_in_the_admin_leaves_the_release_columns_alone(client, prompted_agent, monkeypatch):
    client, _ = _signed_in(client, VIEW, "agents.change_agent")
    first = version_publish(agent=prompted_agent, user=user_with("agents.publish_agent"), note="First.").version
    stale = Agent.objects.get(pk=prompted_agent.pk)
    Agent.objects.filter(pk=prompted_agent.pk).update(published_version=None)  # as a release landing mid-request
    # The admin's change view works on the row as read before the release.
    monkeypatch.setattr("django.contrib.admin.ModelAdmin.get_object", lambda *args, **kwargs: stale)
    data = admin_form_data(prompted_agent, system_prompt="Edited draft.", allowed_groups=[], tools=[])
    data.update({"agent_tools-TOTAL_FORMS": "0", "agent_tools-INITIAL_FORMS": "0"})
    response = client.post(f"/admin/agents/agent/{prompted_agent.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    prompted_agent.refresh_from_db()
    assert prompted_agent.system_prompt == "Edited draft." and prompted_agent.published_version is None
    assert stale.published_version == first
