"""bench.embedded_stress at a small size: the embedded stack (SQLite, the filesystem broker, one
worker) takes runs posted in bursts while eval runs queue theirs, with no worker death and no
run left open. The long form and its figure are in docs/embedded.md."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.e2e
def test_runs_in_bursts_beside_evals_end_with_no_worker_death(embedded_var_dir):
    # A new, migrated var directory: the script's own migrate finds nothing left to do.
    arguments = ["--runs", "60", "--bursts", "3", "--var-dir", str(embedded_var_dir)]
    result = subprocess.run(
        [sys.executable, "-m", "bench.embedded_stress", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "worker deaths: 0; runs left open: 0; 78 runs ended" in result.stdout


def test_the_broker_stress_reads_every_message_whole_through_the_embedded_broker():
    from bench.embedded_stress import broker_stress

    ours = broker_stress(transport_path="platform_site.fs_broker:Transport", messages=400, producers=2)
    assert ours["received"] == 400 and ours["half_written"] == 0
