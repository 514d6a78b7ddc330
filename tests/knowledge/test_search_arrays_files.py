"""A base's arrays as files a host's processes share (knowledge.arrays): indexing writes them, a
process that never searched the base maps them instead of reading the base, and a search whose
arrays are not there answers at once by the Python path while they are built in the background.
Committed rows (transaction=True): the build reads them in a snapshot of its own."""

import fcntl
import mmap
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from knowledge import arrays
from knowledge.models import KeywordMethod
from knowledge.retrieval import search
from knowledge.selectors import base_chunks
from tests.knowledge.helpers import FAQ, add_documents, make_base
from tests.support.pgbouncer import pgbouncer_url
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent.parent
QUERIES = ["几天内可以退货", "How do I get a refund?", "运费多少钱包邮"]
PARTS = [arrays.postings_part(KeywordMethod.TRIGRAM)]


@pytest.fixture(autouse=True)
def _own_var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    arrays.cache_clear()
    yield
    arrays.cache_clear()


def _faq_base():
    base = make_base(chunk_size=300, chunk_overlap=30)
    add_documents(base, *sorted(path.name for path in FAQ.glob("*.md"))[:8])
    return base


def _mapped(array) -> bool:
    """Whether the array's memory is a mapped file, not the process's own."""
    while isinstance(array, np.ndarray):
        array = array.base
    return isinstance(array, mmap.mmap)


def _passages(base, query):
    return [(p.chunk.pk, round(p.score, 6)) for p in search(base=base, query=query, top_k=5)]


def _expected(base, query):
    return [
        (p.chunk.pk, round(p.score, 6)) for p in search(base=base, query=query, top_k=5, chunks=base_chunks(base=base))
    ]


def test_indexing_writes_the_arrays_that_a_fresh_process_maps(tmp_path):
    base = _faq_base()
    folders = list((tmp_path / "knowledge-arrays").glob(f"*/{base.pk}/*/postings-trigram"))
    assert len(folders) == 1 and (folders[0] / "rows.npy").exists()

    arrays.cache_clear()  # a process that never searched the base
    found = arrays.base_arrays(base, parts=PARTS)
    assert found is not None  # no build, no wait: the files were there
    assert _mapped(found.chunk_ids) and _mapped(found.postings[KeywordMethod.TRIGRAM].rows)
    for query in QUERIES:
        assert _passages(base, query) == _expected(base, query)


def test_a_search_without_arrays_answers_by_the_python_path_and_builds_them_in_the_background(tmp_path):
    base = _faq_base()
    root = next((tmp_path / "knowledge-arrays").iterdir()) / str(base.pk)
    for version in root.iterdir():
        if version.is_dir():
            for part in version.iterdir():
                for file in part.iterdir():
                    file.unlink()
                part.rmdir()
    arrays.cache_clear()  # a new host: nothing built, nothing mapped

    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process of the host is building this base
        for query in QUERIES:
            assert _passages(base, query) == _expected(base, query)
        assert arrays.base_arrays(base, parts=PARTS) is None
    assert not list(root.glob("*/postings-trigram"))

    assert _passages(base, QUERIES[0]) == _expected(base, QUERIES[0])  # answered, and a build started
    wait_for(lambda: arrays.base_arrays(base, parts=PARTS), timeout=60, message="the arrays to be built")
    assert list(root.glob("*/postings-trigram/rows.npy"))
    for query in QUERIES:
        assert _passages(base, query) == _expected(base, query)


@pytest.fixture
def pgbouncer():
    yield from pgbouncer_url()


def test_the_arrays_build_through_pgbouncer_in_transaction_mode(pgbouncer, tmp_path):
    base = make_base(chunk_size=300, chunk_overlap=30)
    add_documents(base, "zh-returns.md", "en-returns.md", "zh-coupon.md")
    var = tmp_path / "pooled-var"
    build = (
        "from knowledge import arrays; "
        f"assert arrays.parts_build(base_id={base.pk}, parts=[arrays.postings_part('trigram')])"
    )
    env = {**os.environ, "DATABASE_URL": pgbouncer, "AGENTRY_DB_PREPARE": "0", "AGENTRY_VAR_DIR": str(var)}
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", build],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [rows] = var.glob(f"knowledge-arrays/*/{base.pk}/*/postings-trigram/rows.npy")
    assert len(np.load(rows)) == sum(len(counts) for counts in _trigram_terms(base))


def _trigram_terms(base):
    return [chunk.terms["trigram"] for chunk in base_chunks(base=base)]
