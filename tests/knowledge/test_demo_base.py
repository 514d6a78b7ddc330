"""The customer-service demo's FAQ base searches the way a new base does (trigrams), and its
threshold still separates the demo's answered questions from the one the FAQ does not cover."""

import pytest

from demo.customer_service import CUSTOMER_SERVICE_QUESTIONS, ORDER_FORM_TITLE, faq_seed
from demo.pictures import ORDER_FORM, ORDER_FORM_NUMBER
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.retrieval import search

pytestmark = pytest.mark.django_db


def test_the_demo_base_uses_the_default_keyword_method_of_new_bases():
    base = faq_seed(reset=True)
    assert base.keyword_method == KnowledgeBase().keyword_method == "trigram"
    refund, _, store_hours, damaged = CUSTOMER_SERVICE_QUESTIONS
    assert search(base=base, query=refund)[0].chunk.document.filename == "zh-refund.md"
    assert search(base=base, query=damaged)[0].chunk.document.filename == "zh-damaged.md"
    assert search(base=base, query=store_hours) == []


def test_the_scanned_order_form_is_read_by_ocr_and_found_by_its_order_number():
    base = faq_seed(reset=True)
    document = Document.objects.get(base=base, filename=ORDER_FORM.name)
    assert document.status == Document.Status.INDEXED and document.title == ORDER_FORM_TITLE
    chunk = Chunk.objects.get(document=document)
    # What OCR read from the rotated, specked scan: the number, an item, the total.
    assert ORDER_FORM_NUMBER in chunk.text and "白色陶瓷马克杯" in chunk.text and "193.00" in chunk.text
    hits = search(base=base, query=f"订单 {ORDER_FORM_NUMBER} 买了哪些商品？")
    assert hits[0].chunk == chunk
    # Seeding again without reset does not read the scan again: its chunk stays.
    faq_seed()
    assert Chunk.objects.get(document=document).pk == chunk.pk
