"""Search over the base's arrays (PostgreSQL) against the Python path it replaces, on the shipped
FAQ: the same passages; and a base changed after a search is searched fresh."""

import pytest

from knowledge import arrays
from knowledge.models import Document, KeywordMethod
from knowledge.retrieval import Mode, search
from knowledge.selectors import base_chunks
from knowledge.services import base_index, base_index_enqueue
from tests.knowledge.helpers import FAQ, add_documents, make_base

pytestmark = pytest.mark.django_db

QUERIES = ["几天内可以退货", "How do I get a refund?", "运费多少钱包邮", "change my email", "发票"]


@pytest.fixture(autouse=True)
def _fresh_cache():
    assert arrays.supported()  # the suite's PostgreSQL: these tests compare the two paths
    # The cache outlives a test in this process: each test starts without it.
    arrays.cache_clear()
    yield
    arrays.cache_clear()


def _faq_base(**fields):
    base = make_base(chunk_size=300, chunk_overlap=30, **fields)
    add_documents(base, *sorted(path.name for path in FAQ.glob("*.md")))
    return base


def _same(found, expected):
    assert [p.chunk.pk for p in found] == [p.chunk.pk for p in expected]
    for a, b in zip(found, expected, strict=True):
        assert a.score == pytest.approx(b.score, rel=1e-5)
        assert (a.keyword_score is None) == (b.keyword_score is None)
        assert (a.vector_score is None) == (b.vector_score is None)


@pytest.mark.parametrize("method", [KeywordMethod.TRIGRAM, KeywordMethod.JIEBA])
def test_keyword_search_over_arrays_returns_the_python_paths_passages(method):
    base = _faq_base(keyword_method=method)
    chunks = base_chunks(base=base)
    for query in QUERIES:
        _same(search(base=base, query=query, top_k=5), search(base=base, query=query, top_k=5, chunks=chunks))


def test_vector_and_combined_search_over_arrays_return_the_python_paths_passages(fake_llm):
    base = _faq_base(embeddings_at=fake_llm.api_base)
    chunks = base_chunks(base=base)
    for mode in (Mode.VECTOR, Mode.COMBINED):
        for query in QUERIES:
            found = search(base=base, query=query, top_k=5, mode=mode)
            _same(found, search(base=base, query=query, top_k=5, mode=mode, chunks=chunks))


def test_filters_and_the_threshold_match_the_python_path():
    base = make_base(score_threshold=2.0)
    zh, en = add_documents(base, "zh-returns.md", "en-returns.md", tags=["returns"])
    add_documents(base, "zh-coupon.md", tags=["coupons"])
    for filters in ({"document_ids": [zh.pk]}, {"tags": ["coupons"]}, {"tags": ["returns"], "document_ids": [en.pk]}):
        for query in QUERIES:
            expected = search(base=base, query=query, top_k=10, chunks=base_chunks(base=base, **filters))
            _same(search(base=base, query=query, top_k=10, **filters), expected)
    assert search(base=base, query="退货", tags=["nobody"]) == []


def test_a_base_changed_after_a_search_is_searched_fresh():
    base = make_base()
    [returns] = add_documents(base, "zh-returns.md")
    assert {p.chunk.document_id for p in search(base=base, query="优惠券怎么用", top_k=10)} <= {returns.pk}

    [coupon] = add_documents(base, "zh-coupon.md")  # a new document
    assert search(base=base, query="优惠券怎么用")[0].chunk.document_id == coupon.pk

    returns.text = "优惠券怎么用：结算时选择优惠券即可。"
    returns.save()
    base_index(base_id=base.pk, document_ids=[returns.pk])  # re-indexed with new text
    texts = [p.chunk.text for p in search(base=base, query="结算时选择优惠券", top_k=10)]
    assert "优惠券怎么用：结算时选择优惠券即可。" in texts

    base_index_enqueue(base=base, document_ids=[coupon.pk])  # pending: not searchable meanwhile
    assert all(p.chunk.document_id != coupon.pk for p in search(base=base, query="优惠券", top_k=10))

    Document.objects.filter(pk=returns.pk).delete()
    assert search(base=base, query="优惠券", top_k=10) == []
