"""The embedded SQLite default keeps the Python search path (knowledge.arrays reads PostgreSQL):
the retrieval check on a fresh embedded database scores as docs/knowledge.md says."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # two child processes on a new SQLite file: half a minute

ROOT = Path(__file__).resolve().parents[2]


def _manage(*arguments: str, var_dir: Path) -> str:
    env = os.environ | {
        "DATABASE_URL": "",
        "AGENTRY_VAR_DIR": str(var_dir),
        "DJANGO_SETTINGS_MODULE": "platform_site.settings",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", *arguments], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_search_on_the_embedded_sqlite_scores_as_before(tmp_path):
    _manage("migrate", "-v0", var_dir=tmp_path)
    out = _manage("agentry_retrieval_check", "--no-vectors", var_dir=tmp_path)
    assert (tmp_path / "agentry.sqlite3").exists()
    assert re.search(r"^keyword: trigram \+ BM25\s+0\.73\s+0\.87\s+0\.813$", out, re.MULTILINE), out
    assert re.search(r"^keyword: jieba \+ BM25\s+0\.63\s+0\.83\s+0\.733$", out, re.MULTILINE), out
