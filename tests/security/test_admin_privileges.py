"""Least privilege in the admin: whatever runs a program, loads code or sets a process
environment is for superusers only, tokens are minted for oneself, and an OpenAPI import
changes existing tools only with the permission to change tools and an explicit confirmation."""

import json
import sys

import pytest

from conversations.models import ApiToken
from tests.security.privileges import admin_form_data, user_with
from tools.models import MCPServer, ToolDefinition
from tools.services import tool_definitions_import_openapi, tool_definitions_sync_from_registry

pytestmark = pytest.mark.django_db

MCP_PERMISSIONS = ("tools.view_mcpserver", "tools.add_mcpserver", "tools.change_mcpserver")
TOOL_PERMISSIONS = ("tools.view_tooldefinition", "tools.add_tooldefinition", "tools.change_tooldefinition")
INLINE = {"tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0"}
ENV = json.dumps({"BROWSER": "touch /tmp/pwned", "PYTHONWARNINGS": "ignore::antigravity._:0"})


def _signed_in(client, user):
    client.force_login(user)
    return client


def _stdio_server(**fields) -> MCPServer:
    return MCPServer.objects.create(
        name="local", transport="stdio", command=sys.executable, args=["-m", "mcp_server_time"], **fields
    )


def _mcp_post(server: MCPServer, **changes) -> dict:
    data = admin_form_data(server, **changes)
    for secret in ("env", "headers", "discovered_at", "last_error", "id"):
        data.pop(secret, None)
    return {**data, **INLINE}


def test_staff_cannot_set_the_environment_or_command_of_a_stdio_server(client):
    server = _stdio_server()
    staff = _signed_in(client, user_with(*MCP_PERMISSIONS))
    url = f"/admin/tools/mcpserver/{server.pk}/change/"

    page = staff.get(url).content.decode()
    assert 'name="new_env"' not in page and 'name="command"' not in page and 'name="args"' not in page
    assert "mcp_server_time" in page  # shown, read-only

    staff.post(
        url,
        _mcp_post(server, new_env=ENV, command="/bin/sh", args=["-c", "id"], transport="stdio", description="renamed"),
    )
    server.refresh_from_db()
    assert server.env == "" and server.command == sys.executable and server.args == ["-m", "mcp_server_time"]

    staff.post(url, _mcp_post(server, clear_env=True))
    server.refresh_from_db()
    assert server.command == sys.executable


def test_staff_cannot_create_a_stdio_server_or_switch_a_server_to_stdio(client):
    staff = _signed_in(client, user_with(*MCP_PERMISSIONS))
    response = staff.post(
        "/admin/tools/mcpserver/add/",
        {
            "name": "sneaky",
            "transport": "stdio",
            "command": "/bin/sh",
            "args": '["-c", "id"]',
            "new_env": ENV,
            "connect_timeout_seconds": "20",
            **INLINE,
        },
    )
    assert response.status_code == 200 and not MCPServer.objects.filter(name="sneaky").exists()

    remote = MCPServer.objects.create(name="remote", transport="streamable_http", url="https://mcp.example.com/mcp")
    staff.post(
        f"/admin/tools/mcpserver/{remote.pk}/change/",
        _mcp_post(remote, transport="stdio", command="/bin/sh", new_env=ENV),
    )
    remote.refresh_from_db()
    assert (remote.transport, remote.command, remote.env) == ("streamable_http", "", "")

    # Nor can they leave an environment on a remote server, ready for the day it becomes a command.
    staff.post(f"/admin/tools/mcpserver/{remote.pk}/change/", _mcp_post(remote, new_env=ENV))
    remote.refresh_from_db()
    assert remote.env == ""


def test_a_superuser_still_sets_the_environment(client):
    server = _stdio_server()
    root = _signed_in(client, user_with(superuser=True))
    response = root.post(f"/admin/tools/mcpserver/{server.pk}/change/", _mcp_post(server, new_env='{"TZ": "UTC"}'))
    assert response.status_code == 302
    server.refresh_from_db()
    assert json.loads(server.env) == {"TZ": "UTC"}


def test_discovering_a_stdio_server_is_for_superusers_only(client, tmp_path):
    witness = tmp_path / "ran"
    server = MCPServer.objects.create(
        name="witness", transport="stdio", command=sys.executable, args=["-c", f"open({str(witness)!r}, 'w')"]
    )
    staff = _signed_in(client, user_with(*MCP_PERMISSIONS))
    response = staff.post(
        "/admin/tools/mcpserver/", {"action": "discover_tools", "_selected_action": [server.pk]}, follow=True
    )
    assert "only a superuser can start a stdio server" in response.content.decode()
    assert not witness.exists()
    server.refresh_from_db()
    assert server.last_error == "" and server.discovered_at is None


def test_discovery_of_a_server_that_exits_shows_the_end_of_its_stderr(client):
    server = MCPServer.objects.create(
        name="boom",
        transport="stdio",
        command=sys.executable,
        args=["-c", "import sys; sys.stderr.write('boom: missing key\\n'); sys.exit(3)"],
    )
    root = _signed_in(client, user_with(superuser=True))
    response = root.post(
        "/admin/tools/mcpserver/", {"action": "discover_tools", "_selected_action": [server.pk]}, follow=True
    )
    assert "boom: missing key" in response.content.decode()
    server.refresh_from_db()
    assert "boom: missing key" in server.last_error


def _python_tool() -> ToolDefinition:
    tool_definitions_sync_from_registry()
    return ToolDefinition.objects.get(name="test-echo")


def test_staff_cannot_point_a_python_tool_at_another_callable(client):
    tool = _python_tool()
    staff = _signed_in(client, user_with(*TOOL_PERMISSIONS))
    url = f"/admin/tools/tooldefinition/{tool.pk}/change/"
    assert 'name="python_callable"' not in staff.get(url).content.decode()

    staff.post(url, admin_form_data(tool, python_callable="test-counter"))
    tool.refresh_from_db()
    assert tool.python_callable in ("", "test-echo")

    # Renaming it to another registered tool's name would do the same (the name is the default).
    tool.python_callable = ""
    tool.save()
    ToolDefinition.objects.filter(name="test-counter").delete()
    response = staff.post(url, admin_form_data(tool, name="test-counter"))
    assert "Only a superuser can choose the python code a tool runs." in response.content.decode()
    assert ToolDefinition.objects.get(pk=tool.pk).name == "test-echo"

    # Changing what is not code stays possible.
    response = staff.post(url, admin_form_data(tool, description="Echoes its text back."))
    assert response.status_code == 302
    assert ToolDefinition.objects.get(pk=tool.pk).description == "Echoes its text back."


def test_staff_cannot_turn_an_http_tool_into_a_python_tool(client):
    tool = ToolDefinition.objects.create(
        name="test-counter", description="d", kind="http", http_method="GET", http_url="https://api.example.com/x"
    )
    staff = _signed_in(client, user_with(*TOOL_PERMISSIONS))
    response = staff.post(f"/admin/tools/tooldefinition/{tool.pk}/change/", admin_form_data(tool, kind="python"))
    assert "Only a superuser can choose the python code a tool runs." in response.content.decode()
    assert ToolDefinition.objects.get(pk=tool.pk).kind == "http"


def test_tokens_are_minted_for_oneself_unless_superuser(client):
    other = user_with(staff=False)
    minter = user_with("conversations.add_apitoken", "conversations.view_apitoken", "conversations.change_apitoken")
    staff = _signed_in(client, minter)
    assert 'name="user"' not in staff.get("/admin/conversations/apitoken/add/").content.decode()
    staff.post("/admin/conversations/apitoken/add/", {"user": other.pk, "name": "for someone else"})
    assert not ApiToken.objects.filter(user=other).exists()
    assert ApiToken.objects.get(name="for someone else").user == minter

    root = _signed_in(client, user_with(superuser=True))
    root.post("/admin/conversations/apitoken/add/", {"user": other.pk, "name": "issued"})
    assert ApiToken.objects.filter(user=other, name="issued").exists()


def test_staff_cannot_reopen_someone_elses_revoked_token(client):
    other = user_with(staff=False)
    token = ApiToken.objects.create(user=other, name="revoked", prefix="agt_x", key_hash="h", is_active=False)
    staff = _signed_in(client, user_with("conversations.view_apitoken", "conversations.change_apitoken"))
    response = staff.post(f"/admin/conversations/apitoken/{token.pk}/change/", {"name": "revoked", "is_active": "on"})
    assert response.status_code == 403
    token.refresh_from_db()
    assert not token.is_active


def test_syncing_the_registry_needs_add_and_change_permissions(client):
    staff = _signed_in(client, user_with("tools.view_tooldefinition", "tools.add_tooldefinition"))
    assert staff.post("/admin/tools/tooldefinition/sync-registry/").status_code == 403
    assert not ToolDefinition.objects.exists()

    allowed = _signed_in(client, user_with(*TOOL_PERMISSIONS))
    assert allowed.post("/admin/tools/tooldefinition/sync-registry/").status_code == 302
    assert ToolDefinition.objects.filter(name="test-echo").exists()


IMPORT_URL = "/admin/tools/tooldefinition/import-openapi/"
DOCUMENT = json.dumps(
    {
        "openapi": "3.0.0",
        "servers": [{"url": "https://evil.example.com"}],
        "paths": {"/pets": {"get": {"operationId": "listPets"}}, "/pets/new": {"post": {"operationId": "newPet"}}},
    }
)


def _existing_http_tool() -> ToolDefinition:
    tool_definitions_import_openapi(document=DOCUMENT.replace("evil.example.com", "pets.example.com"), prefix="pet")
    ToolDefinition.objects.filter(name="pet-newPet").delete()
    return ToolDefinition.objects.get(name="pet-listPets")


def test_importing_over_an_existing_tool_needs_the_change_permission(client):
    tool = _existing_http_tool()
    staff = _signed_in(client, user_with("tools.view_tooldefinition", "tools.add_tooldefinition"))
    response = staff.post(
        IMPORT_URL, {"document": DOCUMENT, "prefix": "pet", "overwrite": "on", "confirmed": "pet-listPets"}
    )
    assert response.status_code == 200
    assert "would change existing tools (pet-listPets)" in response.content.decode()
    assert ToolDefinition.objects.get(pk=tool.pk).http_url == "https://pets.example.com/pets"
    assert not ToolDefinition.objects.filter(name="pet-newPet").exists()

    fresh = staff.post(IMPORT_URL, {"document": DOCUMENT, "prefix": "other"})
    assert fresh.status_code == 302 and ToolDefinition.objects.filter(name="other-newPet").exists()


def test_an_import_that_would_overwrite_asks_first_and_lists_the_tools(client):
    tool = _existing_http_tool()
    staff = _signed_in(client, user_with(*TOOL_PERMISSIONS))
    first = staff.post(IMPORT_URL, {"document": DOCUMENT, "prefix": "pet"})
    page = first.content.decode()
    assert first.status_code == 200 and "pet-listPets" in page and 'name="overwrite"' in page
    assert ToolDefinition.objects.get(pk=tool.pk).http_url == "https://pets.example.com/pets"
    assert not ToolDefinition.objects.filter(name="pet-newPet").exists()

    second = staff.post(
        IMPORT_URL, {"document": DOCUMENT, "prefix": "pet", "overwrite": "on", "confirmed": "pet-listPets"}
    )
    assert second.status_code == 302
    assert ToolDefinition.objects.get(pk=tool.pk).http_url == "https://evil.example.com/pets"
    assert ToolDefinition.objects.filter(name="pet-newPet").exists()


def test_an_overwrite_confirmed_for_other_tools_asks_again():
    _existing_http_tool()
    report = tool_definitions_import_openapi(document=DOCUMENT, prefix="pet", may_replace=["pet-somethingElse"])
    assert report.created == ["pet-newPet"] and report.skipped and report.skipped[0].startswith("pet-listPets")
    assert ToolDefinition.objects.get(name="pet-listPets").http_url == "https://pets.example.com/pets"


def test_the_import_page_is_refused_without_the_add_permission(client):
    staff = _signed_in(client, user_with("tools.view_tooldefinition", "tools.change_tooldefinition"))
    assert staff.get(IMPORT_URL).status_code == 403
    assert staff.post(IMPORT_URL, {"document": DOCUMENT, "prefix": "pet"}).status_code == 403
    assert not ToolDefinition.objects.exists()
