from decimal import Decimal
from unittest import mock

import pytest
from django.core.exceptions import ValidationError

from conversations.models import LLMCall
from knowledge.models import Chunk, Document, EmbeddingCall, KnowledgeBase
from knowledge.retrieval import Mode, search
from knowledge.services import BASE_INDEX_TASK, base_index, document_upload
from tests.knowledge.helpers import add_documents, make_base
from tools.executors import execute_tool
from tools.models import ToolDefinition
from tools.registry import ToolContext

pytestmark = pytest.mark.django_db


def test_a_base_gets_its_search_tool():
    base = make_base(name="售后 FAQ")
    tool = base.search_tool
    assert tool.kind == "knowledge" and tool.side_effect == "read"
    assert tool.name.startswith("search_") and "售后 FAQ" in tool.description
    assert tool.parameters["required"] == ["query"]


def test_upload_queues_indexing_after_commit_and_the_task_writes_chunks(django_capture_on_commit_callbacks):
    base = make_base(chunk_size=100, chunk_overlap=10)
    document = Document(base=base, title="退货", text="七天内可以无理由退货。" * 30)
    with mock.patch("knowledge.services.current_app.send_task") as send:
        with django_capture_on_commit_callbacks(execute=True):
            document_upload(document=document)
    send.assert_called_once_with(BASE_INDEX_TASK, args=[base.pk, [document.pk]])
    base.refresh_from_db()
    assert base.status == "indexing" and document.status == "pending"

    base_index(base_id=base.pk, document_ids=[document.pk])
    base.refresh_from_db()
    document.refresh_from_db()
    assert base.status == "ready"
    assert document.status == "indexed" and len(document.content_hash) == 64
    chunks = list(document.chunks.all())
    assert len(chunks) > 2 and all(len(c.text) <= 100 for c in chunks)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert "退货" in chunks[0].terms["jieba"] and "退货" in chunks[0].terms["trigram"]
    assert all(c.embedding is None for c in chunks)


def test_reuploading_replaces_the_chunks():
    base = make_base()
    [document] = add_documents(base, "zh-returns.md")
    old = set(document.chunks.values_list("pk", flat=True))
    document.text = "全新的内容：退货请联系客服。"
    document.save()
    base_index(base_id=base.pk, document_ids=[document.pk])
    assert not Chunk.objects.filter(pk__in=old).exists()
    assert list(document.chunks.values_list("text", flat=True)) == ["全新的内容：退货请联系客服。"]


def test_keyword_search_finds_chinese_and_english_passages():
    base = make_base()
    add_documents(base, "zh-returns.md", "zh-shipping-fee.md", "en-returns.md", "en-shipping-options.md")
    assert search(base=base, query="寄到西藏要加钱吗")[0].chunk.document.title == "zh-shipping-fee.md"
    assert (
        search(base=base, query="How long do I have to send an item back for a refund?")[0].chunk.document.title
        == "en-returns.md"
    )
    assert search(base=base, query="zzzz qqqq") == []


def test_filters_by_document_and_tag():
    base = make_base()
    [zh] = add_documents(base, "zh-returns.md", tags=["zh"])
    [en] = add_documents(base, "en-returns.md", tags=["en"])
    assert {p.chunk.document_id for p in search(base=base, query="退货 return", tags=["en"])} == {en.pk}
    assert {p.chunk.document_id for p in search(base=base, query="退货 return", document_ids=[zh.pk])} == {zh.pk}


def test_embeddings_are_llm_calls_with_tokens_and_cost(fake_llm):
    base = make_base(embeddings_at=fake_llm.api_base)
    [document] = add_documents(base, "zh-refund.md")
    chunks = list(document.chunks.all())
    assert chunks and all(len(c.embedding) == 256 for c in chunks)
    call = LLMCall.objects.get(purpose=LLMCall.Purpose.EMBEDDING)
    assert call.run is None and call.status == "succeeded" and call.http_status == 200
    assert call.prompt_tokens > 0 and call.total_tokens == call.prompt_tokens and not call.usage_estimated
    assert call.cost == (Decimal(call.prompt_tokens * 2) / 1_000_000).quantize(Decimal("1e-8"))
    assert call.request["input_count"] == len(chunks)
    link = EmbeddingCall.objects.get(llm_call=call)
    assert (link.base_id, link.document_id) == (base.pk, document.pk)


def test_vector_search_finds_near_texts(fake_llm):
    base = make_base(embeddings_at=fake_llm.api_base)
    add_documents(base, "zh-refund.md", "en-password.md")
    [best, *_] = search(base=base, query="退款多久到账", mode=Mode.VECTOR)
    assert best.chunk.document.title == "zh-refund.md" and 0 < best.vector_score <= 1
    [best, *_] = search(base=base, query="reset password link", mode=Mode.VECTOR)
    assert best.chunk.document.title == "en-password.md"


def test_an_embedding_failure_marks_the_document_failed():
    base = make_base(embeddings_at="http://127.0.0.1:9/v1")
    [document] = add_documents(base, "zh-refund.md")
    document.refresh_from_db()
    base.refresh_from_db()
    assert document.status == "failed" and "could not be reached" in document.error
    assert base.status == KnowledgeBase.Status.FAILED and "zh-refund.md" in base.last_error
    assert LLMCall.objects.get(purpose="embedding").status == "failed"
    assert not document.chunks.exists()


def test_a_url_on_a_private_address_is_refused(settings):
    # The test settings allow loopback (the fake servers live there); production allows nothing.
    settings.AGENTRY_OUTBOUND_ALLOWLIST = []
    base = make_base()
    document = Document.objects.create(base=base, title="intranet", source="url", url="http://127.0.0.1:8000/faq.html")
    base_index(base_id=base.pk, document_ids=[document.pk])
    document.refresh_from_db()
    # The guard's refusal, not a connection refused by a port nobody listens on (the test passed
    # that way before, and failed whenever something served 127.0.0.1:8000).
    assert document.status == "failed" and "loopback address" in document.error
    assert not document.chunks.exists()


def test_a_url_document_is_fetched_through_the_guard(settings, fake_llm):
    # The fake server is on loopback: allowed here the way an operator allows an internal host.
    host = fake_llm.api_base.split("//")[1].split("/")[0]
    settings.AGENTRY_OUTBOUND_ALLOWLIST = [host]
    base = make_base()
    document = Document.objects.create(base=base, title="", source="url", url=f"http://{host}/_health")
    document.title = document.url
    document.save()
    base_index(base_id=base.pk, document_ids=[document.pk])
    document.refresh_from_db()
    assert document.status == "indexed" and '"status"' in document.text


def test_a_knowledge_tool_cannot_be_made_by_hand():
    tool = ToolDefinition(name="search_by_hand", description="x", parameters={"type": "object"}, kind="knowledge")
    with pytest.raises(ValidationError, match="created by its knowledge base"):
        tool.full_clean()


def test_an_unexpected_error_fails_the_document_and_the_base_does_not_stay_indexing():
    base = make_base()
    document = Document.objects.create(base=base, title="x", text="text")
    with mock.patch("knowledge.services.chunk_sections", side_effect=RuntimeError("boom")):
        base_index(base_id=base.pk, document_ids=[document.pk])
    document.refresh_from_db()
    base.refresh_from_db()
    assert document.status == "failed" and "boom" in document.error
    assert base.status == "failed" and "x: Unexpected error" in base.last_error


def test_the_search_tool_of_a_deleted_base_says_so():
    base = make_base()
    tool = base.search_tool
    base.delete()
    spec = {"id": tool.pk, "name": tool.name, "kind": "knowledge", "timeout_seconds": 5}
    outcome = execute_tool(spec=spec, arguments={"query": "x"}, ctx=ToolContext("r", "c", "k"))
    assert outcome.status == "error" and "knowledge base no longer exists" in outcome.content
