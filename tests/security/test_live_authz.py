"""The authorization rules probed against the real ASGI server (uvicorn on the test database):
a staff member without permissions and an ordinary user try the monitoring JSON, the operator
actions, the try page, other users' conversations through an API token, minting tokens, an MCP
server's environment and an OpenAPI overwrite. Every attempt is refused and changes nothing."""

import json
import secrets
import sys

import httpx
import pytest
from django.conf import settings
from django.test import Client

from conversations.models import ApiToken, Conversation, Message, Run
from tests.security.privileges import admin_form_data, user_with
from tests.support.factories import make_agent, token_for
from tests.support.ledger import ledger_run
from tools.models import MCPServer, ToolDefinition
from tools.services import tool_definitions_import_openapi

pytestmark = pytest.mark.e2e


def _browser(server, user=None) -> httpx.Client:
    """A signed-in browser: the session cookie and a CSRF token, sent as a browser would."""
    csrf = secrets.token_hex(16)  # 32 characters: a valid unmasked CSRF secret
    cookies = {settings.CSRF_COOKIE_NAME: csrf}
    if user is not None:
        client = Client()
        client.force_login(user)
        cookies[settings.SESSION_COOKIE_NAME] = client.cookies[settings.SESSION_COOKIE_NAME].value
    # Cookies go in the header: the jar would not send cookies marked Secure over plain HTTP.
    cookie_header = "; ".join(f"{name}={value}" for name, value in cookies.items())
    return httpx.Client(
        base_url=server.base_url,
        timeout=30,
        follow_redirects=False,
        headers={"Cookie": cookie_header, "X-CSRFToken": csrf},
    )


@pytest.fixture
def world(api_server):
    owner = user_with(staff=False)
    agent = make_agent()
    conversation = Conversation.objects.create(agent=agent, owner=owner)
    run = ledger_run(agent, status="running", stop_reason="", lease_owner="gone:1:x")
    Run.objects.filter(pk=run.pk).update(conversation=conversation)
    return {"owner": owner, "agent": agent, "conversation": conversation, "run": run}


@pytest.fixture(params=["staff without permissions", "ordinary user"])
def prober(request, world):
    return user_with(staff=request.param.startswith("staff"))


def test_operator_pages_json_and_actions_are_refused(api_server, world, prober):
    run = world["run"]
    with _browser(api_server, prober) as browser:
        for path in (
            "/monitor/",
            "/monitor/data.json",
            f"/monitor/runs/{run.pk}/timeline.json",
            f"/monitor/runs/{run.pk}/events.json",
            "/monitor/try/",
        ):
            assert browser.get(path).status_code == 403, path
        for action in ("cancel", "requeue", "retry"):
            assert browser.post(f"/monitor/runs/{run.pk}/{action}/").status_code == 403, action
        sent = browser.post("/monitor/try/send/", data={"agent": world["agent"].pk, "content": "hi"})
        assert sent.status_code == 403 and set(sent.json()) == {"message", "extra"}
    run.refresh_from_db()
    assert (run.status, run.cancel_requested, run.lease_owner) == ("running", False, "gone:1:x")
    assert Run.objects.count() == 1


def test_anonymous_visitors_are_sent_to_the_login_page(api_server, world):
    with _browser(api_server) as browser:
        for path in ("/monitor/", "/monitor/data.json", "/monitor/try/"):
            response = browser.get(path)
            assert response.status_code == 302 and response.headers["location"].startswith("/admin/login/")


def test_other_users_conversations_are_refused_to_api_tokens(api_server, world, prober):
    conversation, run = world["conversation"], world["run"]
    headers = {"Authorization": f"Bearer {token_for(prober)}"}
    with httpx.Client(base_url=api_server.base_url, headers=headers, timeout=30) as api:
        assert api.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 404
        assert api.post(f"/api/v1/conversations/{conversation.pk}/messages/", json={"content": "hi"}).status_code == 404
        assert api.post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 404
        assert api.get(f"/api/v1/runs/{run.pk}/events/").status_code == 404

    reader = user_with("conversations.view_conversation", "conversations.view_run")
    with httpx.Client(
        base_url=api_server.base_url, timeout=30, headers={"Authorization": f"Bearer {token_for(reader)}"}
    ) as api:
        assert api.get(f"/api/v1/conversations/{conversation.pk}/").status_code == 200
        posted = api.post(f"/api/v1/conversations/{conversation.pk}/messages/", json={"content": "hi"})
        assert posted.status_code == 403 and "another user" in posted.json()["message"]
        assert api.post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 403
    assert not Message.objects.filter(conversation=conversation).exists()
    assert not Run.objects.get(pk=run.pk).cancel_requested


def test_tokens_cannot_be_minted_for_someone_else(api_server, world):
    minter = user_with("conversations.add_apitoken", "conversations.view_apitoken")
    with _browser(api_server, minter) as browser:
        browser.post("/admin/conversations/apitoken/add/", data={"user": world["owner"].pk, "name": "borrowed"})
    assert not ApiToken.objects.filter(user=world["owner"]).exists()


def test_staff_cannot_give_an_mcp_server_an_environment(api_server, world):
    # The environment of a process is superuser-only on every server, whatever its transport
    # now: a server can become a stdio one later, and its environment goes with it.
    servers = [
        MCPServer.objects.create(
            name="local", transport="stdio", command=sys.executable, args=["-m", "mcp_server_time"]
        ),
        MCPServer.objects.create(name="remote", transport="streamable_http", url="https://mcp.example.com/mcp"),
    ]
    editor = user_with("tools.view_mcpserver", "tools.change_mcpserver")
    with _browser(api_server, editor) as browser:
        for server in servers:
            data = admin_form_data(server, new_env=json.dumps({"BROWSER": "sh -c id"}), description="x")
            for name in ("env", "headers", "discovered_at", "last_error", "id"):
                data.pop(name, None)
            browser.post(
                f"/admin/tools/mcpserver/{server.pk}/change/",
                data={**data, "tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0"},
            )
    for server in servers:
        server.refresh_from_db()
        assert server.env == "", server.name


def test_an_openapi_import_cannot_overwrite_without_the_change_permission(api_server, world):
    document = {
        "openapi": "3.0.0",
        "servers": [{"url": "https://pets.example.com"}],
        "paths": {"/pets": {"get": {"operationId": "listPets"}}},
    }
    tool_definitions_import_openapi(document=json.dumps(document), prefix="pet")
    document["servers"] = [{"url": "https://evil.example.com"}]
    importer = user_with("tools.view_tooldefinition", "tools.add_tooldefinition")
    with _browser(api_server, importer) as browser:
        response = browser.post(
            "/admin/tools/tooldefinition/import-openapi/",
            data={"document": json.dumps(document), "prefix": "pet", "overwrite": "on", "confirmed": "pet-listPets"},
        )
    assert response.status_code == 200
    assert ToolDefinition.objects.get(name="pet-listPets").http_url == "https://pets.example.com/pets"
