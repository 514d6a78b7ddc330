"""GET /api/v1/runs/ pages by cursor, newest first: a page is an index range that costs the
same at any depth, with no total count, and runs created while a client pages do not shift it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.services import agent_version_current
from conversations.models import Run
from conversations.services import conversation_create
from tests.support.api import client_for
from tests.support.factories import make_agent, make_user

pytestmark = pytest.mark.django_db


def _runs(owner, agent, count: int, *, status: str = "completed") -> list[Run]:
    """`count` runs a minute apart, the newest first; two share a creation time (ties go by id)."""
    conversation = conversation_create(agent=agent, owner=owner)
    runs = Run.objects.bulk_create(
        Run(
            conversation=conversation,
            agent=agent,
            agent_version=agent_version_current(agent=agent),
            status=status,
            stop_reason="final_answer",
        )
        for _ in range(count)
    )
    now = timezone.now()
    for index, run in enumerate(runs):
        run.created_at = now - timedelta(minutes=index)
    if count > 1:
        runs[-1].created_at = runs[-2].created_at
    Run.objects.bulk_update(runs, ["created_at"])
    return sorted(runs, key=lambda run: (run.created_at, run.pk.hex), reverse=True)


def _ids(page: dict) -> list[str]:
    return [run["id"] for run in page["results"]]


def test_pages_follow_the_next_link_newest_first_without_a_count():
    owner, agent = make_user(), make_agent(slug="pager")
    runs = _runs(owner, agent, 57)
    api = client_for(owner)
    first = api.get("/api/v1/runs/").json()
    assert set(first) == {"next", "previous", "results"}
    assert first["previous"] is None and _ids(first) == [str(run.pk) for run in runs[:50]]
    # A run created while the client pages is on no page it has still to read.
    _runs(owner, agent, 1)
    second = api.get(first["next"]).json()
    assert _ids(second) == [str(run.pk) for run in runs[50:]] and second["next"] is None
    assert _ids(api.get(second["previous"]).json()) == [str(run.pk) for run in runs[:50]]


def test_filters_page_the_same_way():
    owner, agent = make_user(), make_agent(slug="pager")
    failed = _runs(owner, agent, 52, status="failed")
    _runs(owner, agent, 5)
    api = client_for(owner)
    page = api.get("/api/v1/runs/?status=failed").json()
    assert _ids(page) == [str(run.pk) for run in failed[:50]]
    assert _ids(api.get(page["next"]).json()) == [str(run.pk) for run in failed[50:]]


# Not base64; a position that is no time ("p=2026"); a time that is no date; an offset that is no
# number ("o=x"); too long.
@pytest.mark.parametrize("cursor", ["nope", "cD0yMDI2", "cD0yMDI2LTEzLTQ1VDAwOjAwOjAw", "bz14", "x" * 500])
def test_a_cursor_not_given_by_the_list_is_a_400(cursor):
    response = client_for(make_user()).get(f"/api/v1/runs/?cursor={cursor}")
    assert response.status_code == 400, response.content
    assert "cursor" in response.json()["message"]
