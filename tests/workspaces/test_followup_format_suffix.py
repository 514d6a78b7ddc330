"""The API router has no `.json` twins of its routes (one answered a POST with a 500): each such
URL is a 404 for a member with every permission, and the documented routes answer as before."""

import uuid

import pytest
from django.urls import URLPattern, URLResolver
from rest_framework.test import APIClient

from api import urls as api_urls
from conversations.tokens import api_token_create
from tests.support.factories import make_agent, make_user
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db


def _names(patterns):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _names(pattern.url_patterns)
        elif isinstance(pattern, URLPattern):
            yield from set(getattr(pattern.pattern, "converters", {})) | set(pattern.pattern.regex.groupindex)


def test_no_api_route_takes_a_format_suffix():
    assert "format" not in set(_names(api_urls.urlpatterns))


@pytest.fixture
def client():
    user = make_user()
    workspace = Workspace.objects.get(pk=default_workspace_id())
    membership_set(user=user, workspace=workspace, role=Role.OWNER)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=user, name='t', workspace=workspace)[1]}")
    return api


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/.json"),
        ("get", "/api/v1/agents.json"),
        ("get", "/api/v1/agents/{slug}.json"),
        ("get", "/api/v1/runs.json"),
        ("get", "/api/v1/runs/{id}.json"),
        ("get", "/api/v1/conversations/{id}/messages.json"),
        ("post", "/api/v1/approvals/{id}/decision.json"),
        ("post", "/api/v1/runs/{id}/cancel.json"),
    ],
)
def test_a_json_suffix_is_a_404(client, method, path):
    agent = make_agent()
    url = path.format(slug=agent.slug, id=uuid.uuid4())
    response = getattr(client, method)(url, {"decision": "approve"}, format="json")
    assert response.status_code == 404, (url, response.status_code)


def test_the_routes_without_a_suffix_still_answer(client):
    agent = make_agent()
    assert client.get("/api/v1/").status_code == 200
    assert client.get(f"/api/v1/agents/{agent.slug}/").status_code == 200
    assert client.get("/api/v1/agents/?format=json").status_code == 200
