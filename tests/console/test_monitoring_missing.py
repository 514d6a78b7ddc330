"""The dashboard's hint names the process that is missing: no worker (the ping) rather than
beat, which the page only knows from stale rollups (console.monitoring.missing)."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from console.monitoring.missing import missing_process
from conversations.monitoring.rollups import rollups_refresh


def _snapshot(*, online=(), pending=False, stale=True, maintenance=0):
    return {
        "workers": {"online": list(online), "error": "", **({"pending": True} if pending else {})},
        "rollups": {"stale": stale},
        "broker": {"queues": [{"name": "llm", "depth": 3}, {"name": "maintenance", "depth": maintenance}]},
    }


@pytest.mark.parametrize(
    ("snapshot", "missing"),
    [
        (_snapshot(), "worker"),
        # No worker is what keeps runs queued, whether or not the rollups are stale.
        (_snapshot(stale=False), "worker"),
        (_snapshot(online=["w@h"]), "beat"),
        (_snapshot(online=["w@h"], maintenance=2), "maintenance"),
        (_snapshot(online=["w@h"], stale=False), ""),
        # The ping's first answer is not in yet: nothing is claimed.
        (_snapshot(pending=True), ""),
    ],
)
def test_missing_process(snapshot, missing):
    assert missing_process(snapshot) == missing


@pytest.fixture
def staff(client):
    user = get_user_model().objects.create_user("oncall", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="conversations", codename__in=["view_run", "add_run"])
    )
    client.force_login(user)
    return user


def _broker(monkeypatch, *, online):
    monkeypatch.setattr(
        "console.monitoring.selectors.queue_depths",
        lambda: {"transport": "filesystem", "queues": [{"name": "maintenance", "depth": 0}], "error": ""},
    )
    monkeypatch.setattr("console.monitoring.selectors.workers_online", lambda: {"online": online, "error": ""})


@pytest.mark.django_db
def test_with_no_worker_the_page_says_no_worker_not_beat(client, staff, monkeypatch):
    _broker(monkeypatch, online=[])
    page = client.get(reverse("monitoring:panel")).content.decode()
    assert 'data-missing="worker"' in page and "no worker is running" in page
    assert "is celery beat running?" not in page
    assert 'id="no-worker-hint"' in page


@pytest.mark.django_db
def test_with_a_worker_and_stale_rollups_the_page_asks_for_beat(client, staff, monkeypatch):
    _broker(monkeypatch, online=["worker-a@host"])
    page = client.get(reverse("monitoring:panel")).content.decode()
    assert 'data-missing="beat"' in page and "is celery beat running?" in page
    assert 'id="no-worker-hint"' not in page
    rollups_refresh()
    assert 'id="stale-hint"' not in client.get(reverse("monitoring:panel")).content.decode()
