"""bench.scale_ledger on PostgreSQL: the set-based generator writes whole runs with every row
they own, grows an existing ledger instead of rebuilding it, and the quick ledger axis of
bench.scale measures and prints its table and targets."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from bench.scale_ledger import CALLS_PER_RUN, ledger_grow
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
    assert "| model calls | added in (s) | dashboard (ms) | agent's page (ms) |" in out
    # About 20,000 calls: the warm-up runs' few count towards the size.
    rows = [line for line in out.splitlines() if line.startswith(("| 19,9", "| 20,0"))]
    assert len(rows) == 1, out
    assert "–" not in rows[0], rows[0]  # every figure measured at the quick size
    assert "dashboard at 10M calls (ms): – (target ≤ 300): not measured" in out
    assert "agent's page at 10M calls (ms): – (target ≤ 300): not measured" in out
    # The purged month was written again: the ledger keeps its size for the next measurement.
    assert LLMCall.objects.filter(model_name="scale-ledger").count() > 19_900
