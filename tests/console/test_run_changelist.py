"""The admin's runs list reads a bounded part of the ledger whatever its size
(console.run_changelist): a count that stops a few pages past the one shown, a date hierarchy
from the list's first and last date, and the joined columns for the page's rows only."""

from datetime import UTC, date, datetime

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations.models import Run
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:conversations_run_changelist")


def test_the_periods_between_two_dates_include_those_without_a_run():
    from console.run_changelist import periods_between

    assert periods_between(date(2025, 11, 30), date(2026, 2, 1), "year") == [date(2025, 1, 1), date(2026, 1, 1)]
    assert periods_between(date(2025, 11, 30), date(2026, 2, 1), "month") == [
        date(2025, 11, 1),
        date(2025, 12, 1),
        date(2026, 1, 1),
        date(2026, 2, 1),
    ]
    assert periods_between(date(2026, 2, 27), date(2026, 3, 2), "day") == [
        date(2026, 2, 27),
        date(2026, 2, 28),
        date(2026, 3, 1),
        date(2026, 3, 2),
    ]


@pytest.fixture
def superuser_client(client):
    user = get_user_model().objects.create_user("root", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


@pytest.fixture
def runs():
    """Five runs of one agent: two in January 2026, none in February, three in March."""
    agent = make_agent()
    days = [(1, 5), (1, 20), (3, 2), (3, 2), (3, 9)]
    return [ledger_run(agent, created_at=datetime(2026, month, day, 12, tzinfo=UTC)) for month, day in days]


def _list(client, params=None):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(RUNS, params or {})
    assert response.status_code == 200
    return response.content.decode(), [query["sql"] for query in queries]


def test_the_count_stops_a_few_pages_past_the_one_shown(superuser_client, runs, monkeypatch):
    from console import run_changelist
    from console.admin import RunAdmin

    monkeypatch.setattr(RunAdmin, "list_per_page", 2)
    monkeypatch.setattr(run_changelist, "PAGES_AHEAD", 0)
    page, statements = _list(superuser_client)
    # Page 1 counts up to 2 runs (and one more, to know there are more): "more than 2".
    assert "more than 2 runs" in page and "5 runs" not in page
    assert "Select all runs of this list (more than 2)" in page
    counts = [sql for sql in statements if "COUNT(" in sql and "conversations_run" in sql]
    assert len(counts) == 1 and "LIMIT 3" in counts[0], counts
    # The count and the date bounds read the runs alone; the page's query joins the question,
    # the version and the conversation.
    assert all(" JOIN " not in sql for sql in counts)
    bounds = [sql for sql in statements if 'MIN("conversations_run"."created_at")' in sql]
    assert len(bounds) == 1 and " JOIN " not in bounds[0]
    assert not [sql for sql in statements if "DISTINCT" in sql and "DATE_TRUNC" in sql.upper()]
    assert any("conversations_runrequest" in sql and "LIMIT 2" in sql for sql in statements)

    # Further pages are reached by their links, and the last one counts exactly.
    assert "?p=2" in page
    last, _ = _list(superuser_client, {"p": "3"})
    assert "5 runs" in last and "more than" not in last


def test_the_date_hierarchy_lists_the_periods_between_the_first_and_last_run(superuser_client, runs):
    page, _ = _list(superuser_client)
    # All runs in 2026: the hierarchy opens on its months, February (no run) among them.
    for month in ("January 2026", "February 2026", "March 2026"):
        assert month in page, month
    march, _ = _list(superuser_client, {"created_at__year": "2026", "created_at__month": "3"})
    # Days from the month's first run to its last.
    for day in ("March 2", "March 5", "March 9"):
        assert day in march, day
    assert "March 1<" not in march and "March 10" not in march
    shown = {str(run.pk)[:8] for run in runs if run.created_at.month == 3}
    assert all(short in march for short in shown)

    empty, statements = _list(superuser_client, {"status__exact": "failed"})
    # An empty list reads no bounds and no page: its count was the one read of the runs.
    assert "0 runs" in empty
    assert not [sql for sql in statements if 'MIN("conversations_run"."created_at")' in sql]
    assert len([sql for sql in statements if 'FROM "conversations_run"' in sql]) == 1, statements


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"agent__id__exact": "AGENT"},
        {"status__exact": "completed"},
        {"stop_reason__exact": "final_answer"},
        {"trigger__exact": "api"},
        {"guardrail": "flag"},
        {"has_error": "no"},
        {"fork": "no"},
        {"created_at__year": "2026", "created_at__month": "3"},
        {"agent__id__exact": "AGENT", "created_at__year": "2026", "created_at__month": "3", "created_at__day": "2"},
    ],
    ids=lambda params: "&".join(params) or "unfiltered",
)
def test_the_list_costs_the_same_statements_whatever_the_ledger_holds(superuser_client, runs, monkeypatch, params):
    from console.admin import RunAdmin

    monkeypatch.setattr(RunAdmin, "list_per_page", 2)
    agent = runs[0].agent
    params = {key: str(agent.pk) if value == "AGENT" else value for key, value in params.items()}
    _, few = _list(superuser_client, params)
    for day in range(2, 12):
        ledger_run(agent, created_at=datetime(2026, 3, day, 12, tzinfo=UTC))
    _, more = _list(superuser_client, params)
    assert len(more) == len(few) <= 12, more
    assert Run.objects.count() == 15
