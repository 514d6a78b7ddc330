"""The embedded SQLite default keeps the Python search path (knowledge.arrays reads PostgreSQL):
the retrieval check on a fresh embedded database scores as docs/knowledge.md says."""

import re

import pytest

from tests.support.embedded import manage

pytestmark = pytest.mark.e2e  # a child process on a new SQLite file (migrated once per session)


def test_search_on_the_embedded_sqlite_scores_as_before(embedded_var_dir):
    out = manage("agentry_retrieval_check", "--no-vectors", var_dir=embedded_var_dir)
    assert (embedded_var_dir / "agentry.sqlite3").exists()
    assert re.search(r"^keyword: trigram \+ BM25\s+0\.73\s+0\.87\s+0\.813$", out, re.MULTILINE), out
    assert re.search(r"^keyword: jieba \+ BM25\s+0\.63\s+0\.83\s+0\.733$", out, re.MULTILINE), out
