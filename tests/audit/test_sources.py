"""Who and from where: the REST API (its token), the command line (the terminal's account), the
system (a worker's discovery, a schedule's fires); secrets masked whatever the way in."""

import getpass
import io
import json
import sys

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connections
from django.db.models import Value
from django.urls import reverse
from django.utils import timezone
from mcp_types import Tool

import manage
from agents.models import Agent
from audit.models import ConfigChange
from audit.registry import MASK
from conversations.models import ApiToken
from conversations.tokens import api_token_create
from evals.models import EvalSuite
from notifications.models import Webhook
from tests.audit.conftest import audit_text, stored
from tests.support.factories import make_agent, make_user
from tools.mcp_sessions import pool
from tools.models import MCPServer, ToolDefinition
from tools.services import mcp_server_discover
from triggers.hooks import hook_secret_new, hook_secret_rotate
from triggers.models import Hook, Schedule
from triggers.schedules import schedule_save, schedules_pause
from widgets.models import Widget
from widgets.services import widget_secret_rotate

pytestmark = pytest.mark.django_db


@pytest.fixture
def token():
    user = make_user(staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_evalsuite", "add_evalsuite", "add_evalcase"])
    )
    return api_token_create(user=user, name="ci")


def test_changes_through_the_api_name_the_user_and_the_token(client, token):
    row, plaintext = token
    auth = {"HTTP_AUTHORIZATION": f"Bearer {plaintext}"}
    created = client.post("/api/v1/eval-suites/", {"name": "weather"}, content_type="application/json", **auth)
    assert created.status_code == 201, created.content
    suite = EvalSuite.objects.get()
    case = client.post(
        f"/api/v1/eval-suites/{suite.pk}/cases/",
        {"name": "sunny", "turns": [{"role": "user", "content": "天气如何？"}], "answer_contains": "晴"},
        content_type="application/json",
        **auth,
    )
    assert case.status_code == 201, case.content
    # Refused input changes nothing, so it writes no row.
    bad = client.post(f"/api/v1/eval-suites/{suite.pk}/cases/", {"name": ""}, content_type="application/json", **auth)
    assert bad.status_code == 400

    rows = ConfigChange.objects.exclude(content_type__model__in=["apitoken", "membership"])
    suite_row, case_row = rows.order_by("id")
    for change in (suite_row, case_row):
        assert change.action == "create" and change.source == "api"
        assert change.actor == row.user and change.api_token_id == row.pk
    assert suite_row.changes["name"] == [None, "weather"] and case_row.changes["answer_contains"] == [None, "晴"]
    assert plaintext not in audit_text()


def test_api_tokens_are_audited_without_the_token_its_hash_or_its_prefix():
    user = make_user()
    row, plaintext = api_token_create(user=user, name="billing backend")
    row.is_active = False
    row.save()
    row.delete()
    created, changed, deleted = ConfigChange.objects.filter(content_type__model="apitoken").order_by("id")
    assert created.object_repr == "billing backend" and created.changes["key_hash"] == [None, MASK]
    assert changed.changes == {"is_active": [True, False]} and deleted.action == "delete"
    text = audit_text()
    assert plaintext not in text and row.key_hash not in text and row.prefix not in text


def test_every_secret_field_is_masked():
    agent = make_agent(slug="hooked")
    owner = make_user(staff=True)
    hook_secret = hook_secret_new()
    hook = Hook.objects.create(agent=agent, name="crm", message="{{ payload }}", owner=owner, secret=hook_secret)
    widget = Widget.objects.create(agent=agent, name="site", secret="widget-secret-123456", owner=owner)
    old_widget_secret = widget.secret
    widget_secret_rotate(widget=widget)
    webhook = Webhook.objects.create(agent=agent, url="https://hooks.example.com/in", secret="whsec-987654321")
    server = MCPServer.objects.create(
        name="maps",
        transport="streamable_http",
        url="https://mcp.example.com/",
        headers='{"Authorization": "Bearer mcp-token-42"}',
    )
    tool = ToolDefinition.objects.create(
        name="crm-post",
        kind="http",
        http_url="https://crm.example.com/x",
        http_secret_headers='{"X-Key": "crm-key-77"}',
    )
    widget.refresh_from_db()
    secrets = [
        hook_secret,
        old_widget_secret,
        widget.secret,
        "whsec-987654321",
        "mcp-token-42",
        "crm-key-77",
    ]
    text = audit_text()
    for secret in filter(None, secrets):
        assert secret not in text
    for model, pk, column in [
        (Hook, hook.pk, "secret"),
        (Webhook, webhook.pk, "secret"),
        (MCPServer, server.pk, "headers"),
        (ToolDefinition, tool.pk, "http_secret_headers"),
    ]:
        assert stored(model, pk, column) not in text
    rotation = ConfigChange.objects.get(content_type__model="widget", action="change")
    assert rotation.changes == {"secret": [MASK, MASK]} and rotation.source == "system"


def test_a_command_typed_at_the_terminal_is_the_command_line_in_the_accounts_name(monkeypatch, tmp_path):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"name": "hello", "turns": [{"role": "user", "content": "hi"}]}) + "\n")
    monkeypatch.setattr(sys, "argv", ["manage.py", "agentry_eval_cases", "import", "smoke", str(cases)])
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    # run_from_argv closes the connections when the command ends: the test's transaction is on one.
    monkeypatch.setattr(connections, "close_all", lambda: None)
    manage.main()
    rows = ConfigChange.objects.order_by("id")
    assert [r.content_type.model for r in rows] == ["evalsuite", "evalcase"]
    assert {(r.source, r.actor_id, r.actor_label) for r in rows} == {("cli", None, getpass.getuser())}
    # Outside the command, the process is the system again.
    EvalSuite.objects.create(name="later")
    assert ConfigChange.objects.latest("id").source == "system"


def test_system_changes_have_no_user(monkeypatch):
    server = MCPServer.objects.create(name="maps", transport="streamable_http", url="https://mcp.example.com/")
    offered = [Tool(name="route", description="Plan a route", input_schema={"type": "object"})]
    monkeypatch.setattr(pool, "list_tools", lambda config: offered)
    mcp_server_discover(server=server)
    offered[0] = Tool(name="route", description="Plan a driving route", input_schema={"type": "object"})
    mcp_server_discover(server=server)
    offered.clear()
    mcp_server_discover(server=server)
    rows = ConfigChange.objects.filter(content_type__model="tooldefinition").order_by("id")
    assert [r.action for r in rows] == ["create", "change", "change"]
    assert rows[1].changes == {"description": ["Plan a route", "Plan a driving route"]}
    assert rows[2].changes == {"is_active": [True, False]}
    assert {(r.source, r.actor_id) for r in rows} == {("system", None)}


def test_a_schedules_fires_write_no_row_but_pausing_it_does(django_assert_num_queries):
    agent = make_agent(slug="daily")
    schedule = schedule_save(
        schedule=Schedule(agent=agent, name="morning", cron="0 8 * * *", message="早上好", owner=make_user(staff=True))
    )
    before = ConfigChange.objects.count()
    # What a fire writes (triggers.schedules): bookkeeping, read and recorded by nobody.
    schedule.next_fire_at, schedule.last_fired_at = timezone.now(), timezone.now()
    with django_assert_num_queries(1):
        schedule.save(update_fields=["next_fire_at", "last_fired_at", "conversation", "updated_at"])
    assert ConfigChange.objects.count() == before
    assert schedules_pause(schedules=[schedule]) == 1
    assert ConfigChange.objects.latest("id").changes == {"enabled": [True, False]}


def test_an_agents_allowed_groups_are_recorded():
    agent = make_agent(slug="team")
    group = Group.objects.create(name="support")
    agent.allowed_groups.add(group)
    agent.allowed_groups.remove(group)
    added, removed = ConfigChange.objects.filter(changes__has_key="allowed_groups").order_by("id")
    assert added.changes == {"allowed_groups": [[], [group.pk]]} and removed.changes == {
        "allowed_groups": [[group.pk], []]
    }


def test_a_deleted_agent_keeps_its_history():
    agent = make_agent(slug="gone", tools=["test-echo"])
    pk = agent.pk
    Agent.objects.get(pk=pk).delete()
    rows = ConfigChange.objects.filter(agent_id=pk)
    assert {(r.content_type.model, r.action) for r in rows} >= {
        ("agent", "create"),
        ("agenttool", "create"),
        ("agenttool", "delete"),
        ("agent", "delete"),
    }
    assert ApiToken.objects.count() == 0 and reverse("admin:audit_configchange_changelist")


def test_a_secret_that_no_longer_decrypts_can_still_be_replaced_and_the_row_says_so():
    agent = make_agent(slug="broken")
    hook = Hook.objects.create(agent=agent, name="crm", message="x", owner=make_user(staff=True), secret="old")
    # Encrypted with a key since removed: the field cannot read it.
    Hook.objects.filter(pk=hook.pk).update(secret=Value("gAAAAAbroken"))
    assert stored(Hook, hook.pk, "secret") == "gAAAAAbroken"
    hook_secret_rotate(hook=Hook.objects.only("pk").get(pk=hook.pk))
    assert ConfigChange.objects.filter(object_id=str(hook.pk)).latest("id").changes == {"secret": [MASK, MASK]}
