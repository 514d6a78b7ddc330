import pytest

from knowledge.models import Document
from knowledge.services import base_index_enqueue
from tests.helpers import wait_for
from tests.knowledge.helpers import FAQ, make_base

pytestmark = pytest.mark.e2e


def test_reindexing_runs_on_the_worker_and_counts_progress(worker, fake_llm):
    base = make_base(embeddings_at=fake_llm.api_base)
    for name in ("zh-returns.md", "en-returns.md"):
        Document.objects.create(base=base, title=name, text=(FAQ / name).read_text(encoding="utf-8"))
    Document.objects.create(base=base, title="intranet", source="url", url="http://10.0.0.1/faq")

    assert base_index_enqueue(base=base) == 3

    def finished():
        base.refresh_from_db()
        return base.status != "indexing"

    wait_for(finished, timeout=60, message="the base to be indexed")
    assert (base.status, base.indexed_documents, base.total_documents) == ("failed", 3, 3)
    assert "intranet" in base.last_error
    statuses = dict(base.documents.values_list("title", "status"))
    assert statuses == {"zh-returns.md": "indexed", "en-returns.md": "indexed", "intranet": "failed"}
    assert all(c.embedding for d in base.documents.filter(status="indexed") for c in d.chunks.all())
