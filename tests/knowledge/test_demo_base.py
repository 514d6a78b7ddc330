"""The customer-service demo's FAQ base searches the way a new base does (trigrams), and its
threshold still separates the demo's answered questions from the one the FAQ does not cover."""

import pytest

from demo.customer_service import CUSTOMER_SERVICE_QUESTIONS, faq_seed
from knowledge.models import KnowledgeBase
from knowledge.retrieval import search

pytestmark = pytest.mark.django_db


def test_the_demo_base_uses_the_default_keyword_method_of_new_bases():
    base = faq_seed(reset=True)
    assert base.keyword_method == KnowledgeBase().keyword_method == "trigram"
    refund, _, store_hours, damaged = CUSTOMER_SERVICE_QUESTIONS
    assert search(base=base, query=refund)[0].chunk.document.filename == "zh-refund.md"
    assert search(base=base, query=damaged)[0].chunk.document.filename == "zh-damaged.md"
    assert search(base=base, query=store_hours) == []
