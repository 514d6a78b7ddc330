"""The audit leaves the database through the API and the command line, for holders of its view
permission; a retention purge never touches it."""

import io
import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.models import ModelConfig
from audit.models import ConfigChange
from conversations.models import Run
from conversations.tokens import api_token_create
from engine.retention import retention_sweep
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tests.support.ledger_seed import ledger_seed

pytestmark = pytest.mark.django_db

URL = "/api/v1/config-changes/export/"


def _auth(*codenames: str) -> dict:
    user = make_user(staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return {"HTTP_AUTHORIZATION": f"Bearer {api_token_create(user=user, name='export')[1]}"}


def _body(response) -> str:
    async def read():
        return b"".join([chunk async for chunk in response.streaming_content])

    # Streamed from a thread of the view's own (platform_site.thread_stream): an async iterator.
    return async_to_sync(read)().decode()


# The view reads on threads of its own (platform_site.asyncdb): the rows must be committed.
@pytest.mark.django_db(transaction=True)
def test_the_api_streams_the_audit_to_holders_of_its_permission(client):
    model = ModelConfigFactory(name="gpt", api_key="sk-export-secret-000111")
    weather = make_agent(slug="weather", model_config=model)
    make_agent(slug="other", model_config=model)
    ModelConfig.objects.filter(pk=model.pk).update(name="untouched")  # not through save(): no row
    auth = _auth("view_configchange")

    response = client.get(URL, **auth)
    assert response.status_code == 200 and response["Content-Type"].startswith("application/x-ndjson")
    records = [json.loads(line) for line in _body(response).splitlines()]
    # The token's and its user's joining the first workspace are rows too.
    tokens = ConfigChange.objects.filter(content_type__model__in=["apitoken", "membership"]).count()
    assert len(records) == ConfigChange.objects.count() == 3 + tokens
    assert [r["id"] for r in records] == sorted(r["id"] for r in records)
    first = records[0]
    assert first["object_type"] == "agents.modelconfig" and first["action"] == "create"
    assert first["changes"]["api_key"][1] != "sk-export-secret-000111"

    only = [json.loads(line) for line in _body(client.get(URL, {"agent": "weather"}, **auth)).splitlines()]
    assert {r["agent_id"] for r in only} == {weather.pk}
    csv_body = _body(client.get(URL, {"format": "csv"}, **auth))
    assert csv_body.splitlines()[0].startswith("id,at,action") and "sk-export-secret" not in csv_body
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    assert _body(client.get(URL, {"since": later}, **auth)) == ""


# The view reads on threads of its own (platform_site.asyncdb): the rows must be committed.
@pytest.mark.django_db(transaction=True)
def test_the_api_export_refuses_without_the_permission_and_names_a_bad_parameter(client):
    assert client.get(URL).status_code == 401
    refused = client.get(URL, **_auth("view_run"))
    assert refused.status_code == 403 and "message" in refused.json()
    auth = _auth("view_configchange")
    for query, param in [
        ({"format": "xml"}, "format"),
        ({"since": "yesterday"}, "since"),
        ({"agent": "nope"}, "agent"),
    ]:
        response = client.get(URL, query, **auth)
        assert response.status_code == 400 and param in response.json()["extra"]["fields"]
    assert client.post(URL, **auth).status_code == 405


def test_the_command_exports_the_audit():
    ModelConfigFactory(name="gpt")
    out = io.StringIO()
    call_command("agentry_audit_export", "--format", "jsonl", stdout=out)
    (record,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert record["object"].startswith("gpt") and record["source"] == "system"
    with pytest.raises(CommandError, match="--since"):
        call_command("agentry_audit_export", "--since", "soon")


def test_a_retention_purge_leaves_the_audit_alone():
    agent = make_agent(slug="short-lived", retention_days=30)
    agent.description = "kept briefly"
    agent.save()
    ledger_seed(agent, 3, created_at=timezone.now() - timedelta(days=40))
    before = list(ConfigChange.objects.order_by("id").values())
    assert len(before) >= 2

    summary = retention_sweep()

    assert summary["purged"] and not Run.objects.filter(agent=agent).exists()
    assert list(ConfigChange.objects.order_by("id").values()) == before
