"""bench.scale at its quick sizes: the conversation-length axis seeds histories, advances runs in
the script's own process and prints its table with the target beside it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the benchmark runs on PostgreSQL"),
]


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def test_the_quick_turns_axis_prints_its_table_and_target(transactional_db):
    env = {**os.environ, "DATABASE_URL": _database_url()}
    result = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--quick", "--axes", "turns"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "Agentry scale curves on " in out and "load average before: " in out
    assert "| prior turns | first run: CPU per step (ms) |" in out
    rows = [line for line in out.splitlines() if line.startswith(("| 1 |", "| 5 |", "| 20 |"))]
    assert len(rows) == 3, out
    # At the quick sizes the 200-turn point is not measured, and the target says so.
    assert "CPU per step at 200 prior turns ÷ at 1, first run: – (target ≤ 1.5): not measured" in out
