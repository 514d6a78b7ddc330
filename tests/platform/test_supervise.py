"""scripts/lib.sh's supervise, which scripts/dev.sh runs every process of the embedded stack
under: a process that exits is reported on the terminal and started again, and stopping the
stack stops the process."""

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _bash(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source scripts/lib.sh; pids=(); {script}"],
        cwd=ROOT,
        env={**os.environ, "SUPERVISOR_LOG": str(tmp_path / "supervisor.log")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_process_that_exits_is_reported_and_started_again(tmp_path):
    log = tmp_path / "flaky.log"
    result = _bash(
        f"supervise flaky {log} sh -c 'echo started; echo JSONDecodeError >&2; exit 3'; "
        'sleep 2.8; kill "${pids[@]}"; wait',
        tmp_path,
    )
    assert "!!! flaky exited with status 3" in result.stderr
    assert f"Last lines of {log}" in result.stderr and "    JSONDecodeError" in result.stderr
    # Started at least twice: the first exit was followed by a restart.
    assert log.read_text().count("started") >= 2
    assert "--- restarted after exit status 3 ---" in log.read_text()
    assert "flaky exited with status 3" in (tmp_path / "supervisor.log").read_text()


def test_stopping_the_supervisor_stops_its_process_without_a_report(tmp_path):
    pid_file = tmp_path / "child.pid"
    result = _bash(
        f"supervise sleeper {tmp_path / 'sleeper.log'} sh -c 'echo $$ > {pid_file}; exec sleep 30'; "
        f'for _ in $(seq 50); do [[ -s {pid_file} ]] && break; sleep 0.1; done; kill "${{pids[@]}}"; wait',
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    child = int(pid_file.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "zombie" in Path(f"/proc/{child}/status").read_text()
    assert "exited" not in result.stderr
