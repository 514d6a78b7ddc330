"""bench.scale_ledger on PostgreSQL: the set-based generator writes whole runs with every row
they own, grows an existing ledger instead of rebuilding it, and the quick ledger axis of
bench.scale measures and prints its table and targets."""

import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from django.db import connection

from bench.scale_ledger import (
    CALLS_PER_RUN,
    NOT_AVAILABLE,
    _clients,
    ledger_grow,
    ledger_reads,
    page_measure,
    page_reads,
    page_table,
    pages_rows,
    pages_summary,
)
from bench.tables import COLUMNS, markdown_table
from conversations.models import Conversation, LLMCall, Run, RunEvent, ToolInvocation

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the generator's SQL is PostgreSQL's")


def _counts() -> dict[str, int]:
    return {
        "conversations": Conversation.objects.count(),
        "runs": Run.objects.count(),
        "calls": LLMCall.objects.count(),
        "tools": ToolInvocation.objects.count(),
        "events": RunEvent.objects.count(),
    }


@pytest.mark.django_db
def test_a_ledger_is_written_whole_runs_at_a_time_and_grown_not_rebuilt():
    ledger_grow(400)
    runs = 400 // CALLS_PER_RUN
    assert _counts() == {"conversations": runs, "runs": runs, "calls": 400, "tools": 3 * runs, "events": 3 * runs}
    first = set(Run.objects.values_list("pk", flat=True))

    assert ledger_grow(400) == {"generate_s": 0.0}  # the size is there: nothing added
    ledger_grow(800)
    assert _counts()["calls"] == 800
    assert first < set(Run.objects.values_list("pk", flat=True))  # the first runs are kept

    # Each run's rows hang together as the engine writes them: a tool call per non-final model
    # call, pointing at that call, and events numbered from 1.
    run = Run.objects.first()
    calls = list(run.llm_calls.order_by("iteration").values_list("iteration", "finish_reason"))
    assert calls == [(1, "tool_calls"), (2, "tool_calls"), (3, "tool_calls"), (4, "stop")]
    assert sorted(ToolInvocation.objects.filter(run=run).values_list("llm_call__iteration", flat=True)) == [1, 2, 3]
    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "type"))
    assert events == [(1, "run.queued"), (2, "run.running"), (3, f"run.{run.status}")]


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.mark.e2e
def test_the_quick_ledger_axis_prints_its_table_and_targets(transactional_db):
    env = {**os.environ, "DATABASE_URL": _database_url()}
    result = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--quick", "--axes", "ledger"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "| model calls | added in (s) | dashboard (ms) | runs list p95 (ms) |" in out
    # About 20,000 calls: the warm-up runs' few count towards the size.
    rows = [line for line in out.splitlines() if line.startswith(("| 19,9", "| 20,0"))]
    assert len(rows) == 1, out
    assert "–" not in rows[0], rows[0]  # every figure measured at the quick size
    assert "dashboard at 10M calls (ms): – (target ≤ 300): not measured" in out
    # The operator's pages, a row each, and their target.
    assert "| page | model calls | median (ms) | p95 (ms) | statements |" in out
    assert "| agent's page | 20,0" in out or "| agent's page | 19,9" in out, out
    assert "slowest operator page at 10M calls (ms): – (target ≤ 300): not measured" in out
    # The purged month was written again: the ledger keeps its size for the next measurement.
    assert LLMCall.objects.filter(model_name="scale-ledger").count() > 19_900


# --- the operator's pages ------------------------------------------------------------------------


def test_the_page_reads_are_the_agents_page_and_the_runs_list_by_each_filter():
    reads = dict(page_reads(slug="bench", agent_id=7, version_id=9, conversation_id="c0ffee", day=date(2026, 3, 4)))
    assert reads["agent's page"] == "/monitor/agents/bench/"
    assert reads["playground"] == "/monitor/agents/bench/playground/"
    assert reads["conversation thread"] == "/monitor/conversations/c0ffee/"
    assert reads["runs list"] == "/admin/conversations/run/"
    assert reads["runs list: agent"] == "/admin/conversations/run/?agent__id__exact=7"
    assert reads["runs list: version"] == "/admin/conversations/run/?agent_version__id__exact=9"
    assert reads["runs list: metadata"] == "/admin/conversations/run/?meta=customer%3Ascale-bench"
    assert reads["runs list: month"] == "/admin/conversations/run/?created_at__year=2026&created_at__month=3"
    assert reads["runs list: agent's day"].endswith(
        "?agent__id__exact=7&created_at__year=2026&created_at__month=3&created_at__day=4"
    )


def test_the_slowest_page_is_the_rows_summary_and_pages_not_there_print_so():
    pages = [
        {"page": "a", "status": "ok", "median_ms": 12.0, "p95_ms": 15.0, "statements": 9},
        {"page": "b", "status": "ok", "median_ms": 40.0, "p95_ms": 41.0, "statements": 3},
        {"page": "c", "status": NOT_AVAILABLE},
    ]
    assert pages_summary(pages) == {"pages_slowest": "b", "pages_slowest_ms": 40.0, "pages_slowest_p95_ms": 41.0}
    assert pages_summary(pages[2:]) == {}
    rows = pages_rows([{"llm_calls": 400, "pages": pages}])
    assert [row["page"] for row in rows] == ["a", "b", "c"]
    assert rows[0]["llm_calls"] == 400 and rows[0]["statements"] == 9
    assert rows[2]["median_ms"] == NOT_AVAILABLE
    assert NOT_AVAILABLE in markdown_table(rows, COLUMNS["ledger_pages"]).splitlines()[-1]


@pytest.mark.django_db
def test_each_page_is_measured_on_a_tiny_ledger_and_a_missing_route_or_filter_is_not_available():
    ledger_grow(40)
    console, _api = _clients()

    page = page_measure(console, "agent's page", "/monitor/agents/scale-ledger-1/", 3)
    assert page["status"] == "ok" and page["statements"] > 0 and 0 < page["median_ms"] <= page["p95_ms"]
    filtered = page_measure(console, "failed", "/admin/conversations/run/?status__exact=failed", 3)
    assert filtered["status"] == "ok" and filtered["statements"] > 0

    # A filter the admin does not know (it answers with the list again, ?e=1) and a route the
    # URLs do not have are "not available", not failures; a page that fails stops the script.
    assert page_measure(console, "x", "/admin/conversations/run/?no_such_filter=1", 3)["status"] == NOT_AVAILABLE
    assert page_measure(console, "x", "/monitor/agents/scale-ledger-1/no-such-page/", 3)["status"] == NOT_AVAILABLE
    with pytest.raises(SystemExit):
        page_measure(console, "x", "/monitor/agents/no-such-agent/", 3)

    table = page_table(console, repeat=2)
    assert [row["page"] for row in table][:4] == ["agent's page", "playground", "conversation thread", "runs list"]
    by_page = {row["page"]: row for row in table}
    # What this code base has is measured whatever the others add; every read has a verdict.
    for always in ("agent's page", "runs list", "runs list: agent", "runs list: trigger", "runs list: agent's day"):
        assert by_page[always]["status"] == "ok", by_page[always]
    assert {row["status"] for row in table} <= {"ok", NOT_AVAILABLE}


@pytest.mark.django_db
def test_reads_only_measures_the_ledger_present_and_adds_nothing():
    ledger_grow(40)
    before = _counts()
    [row] = ledger_reads()
    assert _counts()["calls"] == before["calls"] == row["llm_calls"] == 40
    assert _counts()["runs"] == before["runs"]  # no live run, export or retention wrote or purged any
    for key in ("dashboard_ms", "runs_list_p95_ms", "runs_filtered_p95_ms", "timeline_ms", "pages_slowest_ms"):
        assert row[key] > 0, key
    assert row["pages_slowest"] in {page["page"] for page in row["pages"] if page["status"] == "ok"}
    table = markdown_table([row], COLUMNS["ledger_reads"])
    assert table.splitlines()[2].startswith("| 40 |") and "–" not in table
