"""The run admin's export actions: a download of the selected runs for those who hold export_run,
nothing for those who only view runs. The file is read on a thread of its own (committed rows)."""

import csv
import io
import json

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from tests.support.factories import make_agent
from tests.support.ledger_seed import ROWS_PER_RUN, ledger_seed

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "admin:conversations_run_changelist"


def _staff(*codenames: str) -> User:
    user = User.objects.create_user(username=f"staff-{'-'.join(codenames)}", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="conversations", codename__in=codenames)
    )
    return user


def _body(response) -> str:
    # The sync test client reads the async stream through the response's own iteration.
    return b"".join(response).decode()


def _act(client, action: str, runs):
    return client.post(
        reverse(CHANGELIST), {"action": action, ACTION_CHECKBOX_NAME: [str(r.pk) for r in runs], "index": 0}
    )


def test_an_auditor_downloads_the_selected_runs_as_jsonl_and_csv(client):
    runs = ledger_seed(make_agent(slug="weather"), 4)
    client.force_login(_staff("view_run", "export_run"))
    response = _act(client, "export_runs_jsonl", runs[:3])
    assert response.status_code == 200
    assert response["Content-Disposition"].endswith('.jsonl"')
    lines = [json.loads(line) for line in _body(response).splitlines()]
    assert {line["id"] for line in lines} == {str(r.pk) for r in runs[:3]}
    assert all(len(line["events"]) == ROWS_PER_RUN["events"] for line in lines)
    response = _act(client, "export_runs_csv", runs[3:])
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.DictReader(io.StringIO(_body(response))))
    assert {row["run_id"] for row in rows} == {str(runs[3].pk)}


def test_viewing_runs_is_not_enough_to_export_them(client):
    runs = ledger_seed(make_agent(slug="weather"), 2)
    client.force_login(_staff("view_run"))
    page = client.get(reverse(CHANGELIST))
    assert page.status_code == 200 and b"export_runs_jsonl" not in page.content
    response = _act(client, "export_runs_jsonl", runs)
    # The admin refuses an action the user may not take: no file, the list again.
    assert "Content-Disposition" not in response
    assert response.status_code in (200, 302)
    client.force_login(_staff("export_run"))
    assert client.get(reverse(CHANGELIST)).status_code == 403
