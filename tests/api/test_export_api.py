"""GET /api/v1/runs/export/: who sees which runs, the error contract for bad filters, and a body
streamed (through the ASGI handler) in memory that does not grow with the ledger.

The export is read on a thread of its own, with its own database connection: the rows must be
committed, hence transactional_db."""

import csv
import io
import json
import tracemalloc
from collections import Counter
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, Permission
from django.test import AsyncClient
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from tests.support.factories import make_agent, make_user, token_for
from tests.support.ledger_seed import ROWS_PER_RUN, ledger_seed

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/runs/export/"


def _client(user) -> dict:
    return {"Authorization": f"Bearer {token_for(user)}"}


@async_to_sync
async def _get(headers: dict, params: dict | None = None, on_chunk=None):
    """The response (served by the ASGI handler), and its body read chunk by chunk; with
    `on_chunk`, each chunk goes there and the body is not kept."""
    response = await AsyncClient().get(URL, params or {}, headers=headers)
    if not response.streaming:
        return response, response.content
    body = []
    async for chunk in response.streaming_content:
        if on_chunk is None:
            body.append(chunk)
        else:
            on_chunk(chunk)
    return response, b"".join(body)


def _ids(body: bytes) -> set[str]:
    return {json.loads(line)["id"] for line in body.decode().splitlines()}


def test_users_export_their_own_runs_and_staff_with_the_view_permission_everyones():
    agent = make_agent(slug="weather")
    alice, bob = make_user(), make_user()
    staff_without_view = make_user(staff=True)
    auditor = make_user(staff=True)
    auditor.user_permissions.add(Permission.objects.get(codename="view_run"))
    alices = ledger_seed(agent, 3, owner=alice)
    bobs = ledger_seed(agent, 2, owner=bob)

    response, body = _get(_client(alice))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="agentry-runs-')
    assert _ids(body) == {str(r.pk) for r in alices}
    assert {json.loads(line)["user"] for line in body.decode().splitlines()} == {alice.username}
    assert _ids(_get(_client(bob))[1]) == {str(r.pk) for r in bobs}
    assert _ids(_get(_client(staff_without_view))[1]) == set()
    assert _ids(_get(_client(auditor))[1]) == {str(r.pk) for r in alices + bobs}


def test_csv_with_agent_and_time_filters():
    weather, other = make_agent(slug="weather"), make_agent(slug="other")
    user = make_user()
    now = timezone.now()
    old = ledger_seed(weather, 2, owner=user, created_at=now - timedelta(days=10))
    recent = ledger_seed(weather, 3, owner=user, created_at=now - timedelta(hours=1))
    ledger_seed(other, 2, owner=user, created_at=now - timedelta(hours=1))
    since = (now - timedelta(days=1)).isoformat()
    response, body = _get(_client(user), {"format": "csv", "agent": "weather", "since": since})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert {row["run_id"] for row in rows} == {str(r.pk) for r in recent}
    assert Counter(row["kind"] for row in rows)["llm_call"] == 3 * ROWS_PER_RUN["llm_calls"]
    _, body = _get(_client(user), {"agent": "weather", "until": since})
    assert _ids(body) == {str(r.pk) for r in old}


@pytest.mark.parametrize(
    ("params", "param", "message"),
    [
        ({"format": "xml"}, "format", "format must be one of: jsonl, csv."),
        ({"agent": "nobody"}, "agent", "No agent has the slug 'nobody'."),
        ({"since": "last week"}, "since", "since must be an ISO 8601 date or date-time, e.g. 2026-11-30T08:00:00Z."),
        ({"until": "2026-02-30"}, "until", "until must be an ISO 8601 date or date-time, e.g. 2026-11-30T08:00:00Z."),
        ({"since": "2026-03-01", "until": "2026-03-01T00:00:00"}, "until", "until must be later than since."),
    ],
)
def test_bad_filters_are_a_400_naming_the_parameter(params, param, message):
    response, _ = _get(_client(make_user()), params)
    assert response.status_code == 400
    assert response.json() == {"message": message, "extra": {"fields": {param: [message]}}}


def test_an_agent_kept_from_the_user_is_as_unknown_as_a_missing_one():
    hidden = make_agent(slug="hidden")
    hidden.allowed_groups.add(Group.objects.create(name="finance"))
    user = make_user()
    response, _ = _get(_client(user), {"agent": "hidden"})
    assert response.status_code == 400
    assert response.json()["message"] == "No agent has the slug 'hidden'."
    # Once the user has talked to it (or for those who see everyone's runs), the slug filters.
    (run,) = ledger_seed(hidden, 1, owner=user)
    response, body = _get(_client(user), {"agent": "hidden"})
    assert response.status_code == 200 and _ids(body) == {str(run.pk)}


def test_without_credentials_401_and_other_methods_405():
    response, _ = _get({})
    assert response.status_code == 401
    assert response.json()["message"] == "Authentication credentials were not provided."
    response = async_to_sync(AsyncClient().post)(URL, headers=_client(make_user()))
    assert response.status_code == 405


def test_the_export_is_in_the_openapi_schema():
    operation = SchemaGenerator().get_schema(request=None, public=True)["paths"][URL]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"format", "agent", "since", "until"}
    assert {"200", "400", "401"} <= set(operation["responses"])


def _peak_growth(fn) -> int:
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_the_streamed_export_holds_about_the_same_memory_for_ten_times_the_runs():
    auditor = make_user(staff=True)
    # view_agent too: the model calls' requests make the body many times the memory it may take.
    auditor.user_permissions.add(*Permission.objects.filter(codename__in=["view_run", "view_agent"]))
    client = _client(auditor)
    ledger_seed(make_agent(slug="small"), 300)
    ledger_seed(make_agent(slug="large"), 3000)
    growth, received = {}, {}
    for slug, count in (("small", 300), ("large", 3000)):
        # Parsed as it arrives, line by line, keeping only counts.
        seen = Counter()
        pending = bytearray()

        def on_chunk(chunk: bytes, seen=seen, pending=pending):
            pending.extend(chunk)
            *lines, rest = bytes(pending).split(b"\n")
            pending[:] = rest
            seen["bytes"] += len(chunk)
            for line in lines:
                record = json.loads(line)
                seen["runs"] += 1
                seen["events"] += len(record["events"])

        growth[slug] = _peak_growth(lambda slug=slug, on_chunk=on_chunk: _get(client, {"agent": slug}, on_chunk))
        assert seen["runs"] == count and seen["events"] == count * ROWS_PER_RUN["events"] and not pending
        received[slug] = seen["bytes"]
    assert received["large"] > 2 * growth["large"], (received, growth)
    assert growth["large"] < 1.5 * growth["small"] + 1_000_000, growth
