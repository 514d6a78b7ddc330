"""A second test run on a test database another run uses is refused at once, naming that run;
a run on a database of its own runs beside it."""

import os
import subprocess
import sys
from pathlib import Path

import psycopg
from django.conf import settings

from tests.support.run_lock import HOLDER_PREFIX, _key

ROOT = Path(__file__).resolve().parents[2]
# A "default" of this test's own, so that the test collides with nobody's real run.
DATABASE = "agentry_lock_check"
REDIS_URL = "redis://127.0.0.1:6379/15"


def _server_url(name: str) -> str:
    db = settings.DATABASES["default"]
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


def _collecting(**environment) -> subprocess.Popen:
    """A pytest run of database tests (collected only: the lock is taken once they are known),
    started; `_collected` waits for it."""
    env = {k: v for k, v in os.environ.items() if k not in ("TEST_DATABASE_URL", "TEST_REDIS_URL")}
    env.update({"DATABASE_URL": _server_url(DATABASE), "REDIS_URL": REDIS_URL, "CELERY_BROKER_URL": "", **environment})
    command = [sys.executable, "-m", "pytest", "tests/console/test_operator_display.py", "--collect-only", "-q"]
    return subprocess.Popen(
        [*command, "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _collected(process: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_a_second_run_on_the_defaults_is_refused_naming_the_first():
    other = psycopg.connect(
        _server_url("postgres"), autocommit=True, application_name=f"{HOLDER_PREFIX} pid 4242 started 2026-12-07"
    )
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [_key(f"database test_{DATABASE}")])
        # Side by side, as two developers' runs would be: each start costs seconds of imports.
        on_defaults = _collecting()
        on_its_own = _collecting(DATABASE_URL=_server_url("agentry_lock_own"))
        refused, beside = _collected(on_defaults), _collected(on_its_own)
    finally:
        other.close()
    after = _collected(_collecting())

    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert (
        f"another test run (pid 4242 started 2026-12-07) is using database test_{DATABASE}; "
        "set TEST_DATABASE_URL and TEST_REDIS_URL"
    ) in refused.stderr
    assert beside.returncode == 0, beside.stdout + beside.stderr
    assert after.returncode == 0, after.stdout + after.stderr
