"""Two worker hosts on one broker and one PostgreSQL, one of them lost for good mid-runs: the
chaos script's group mode (`bench.chaos --groups 2`), in its short form, ends with every run
finished on the surviving group and its invariants OK."""

import os
import subprocess
import sys

import pytest

from tests.conftest import _broker_emptied, _database_url
from tests.support.workers import ROOT

pytestmark = pytest.mark.e2e
SHORT_FORM = ["--groups", "2", "--workers", "1", "--runs", "16", "--latency-ms", "200", "--timeout", "90"]


def test_every_run_finishes_on_the_surviving_worker_group(transactional_db):
    # The script runs as CI runs it, against the test database (migrated already; its rows go
    # with transactional_db) and the suite's Redis and test settings (short leases).
    env = {**os.environ, "DATABASE_URL": _database_url()}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.chaos", *SHORT_FORM],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        # The killed group's deliveries stay recorded as held in Redis: no later worker may get them.
        _broker_emptied()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("RESULT:") and lines[-1].endswith("-> OK"), output
    assert "0 kill missed, 0 not taken over" in lines[-1]
    assert "statuses: completed 16;" in done.stdout
    takeover = next(line for line in lines if line.startswith("takeover:"))
    # The kill landed mid-runs: the dead group held runs under its leases.
    assert " 0 of them under its leases" not in takeover, takeover
