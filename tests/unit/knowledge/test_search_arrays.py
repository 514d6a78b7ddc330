"""The array scoring of knowledge.arrays and knowledge.retrieval against the Python scoring it
replaces on PostgreSQL: the same BM25 scores and the same fused ranking."""

import random

import numpy as np
import pytest

from knowledge.arrays import bm25_scores, postings_from
from knowledge.keyword import TERMS, bm25, term_counts
from knowledge.models import KeywordMethod
from knowledge.retrieval import rrf, rrf_rows

TEXTS = [
    "退货需要在七天内申请，商品需保持完好。",
    "How do I return an item? Returns are accepted within 7 days.",
    "运费由买家承担，满99元包邮。",
    "Refunds go back to the original payment method within 5 days.",
    "订单发货后可以在“我的订单”里查看物流。",
    "",
    "You can change your email address in account settings.",
]


@pytest.mark.parametrize("method", [KeywordMethod.TRIGRAM, KeywordMethod.JIEBA])
@pytest.mark.parametrize("query", ["七天内可以退货吗", "return refund days", "包邮", "nothing matches zzz"])
def test_bm25_over_postings_equals_the_python_bm25(method, query):
    counts = [term_counts(text)[method] for text in TEXTS]
    postings = postings_from(enumerate(counts), len(counts))
    for allowed_rows in (range(len(TEXTS)), [0, 2, 3]):
        allowed = np.isin(np.arange(len(TEXTS)), list(allowed_rows))
        scores = bm25_scores(postings, set(TERMS[method](query)), allowed)
        expected = dict(bm25(query, [(row, counts[row]) for row in allowed_rows], method=method))
        assert {row: pytest.approx(score) for row, score in expected.items()} == {
            int(row): float(scores[row]) for row in np.flatnonzero(scores > 0)
        }


def test_fused_rows_rank_as_rrf_does():
    rng = random.Random(43)
    for _ in range(50):
        size = 30
        keyword = rng.sample(range(size), rng.randint(0, size))
        vector = rng.sample(range(size), rng.randint(0, size))
        ranked, fused = rrf_rows(np.array(keyword, dtype=np.int64), np.array(vector, dtype=np.int64), size)
        expected = rrf([keyword, vector])
        assert [int(row) for row in ranked] == [key for key, _ in expected]
        assert [float(fused[row]) for row in ranked] == pytest.approx([score for _, score in expected])
