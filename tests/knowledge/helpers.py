"""Bases and documents for the knowledge tests."""

from pathlib import Path

from knowledge.models import Document, KnowledgeBase
from knowledge.services import base_index, knowledge_base_save
from tests.factories import ModelConfigFactory

FAQ = Path(__file__).resolve().parents[2] / "knowledge" / "fixtures" / "faq"


def make_base(*, embeddings_at: str | None = None, **fields) -> KnowledgeBase:
    """A base; with `embeddings_at` (an API base URL) it embeds through that endpoint."""
    if embeddings_at is not None:
        fields["embedding_model"] = ModelConfigFactory(
            base_url=embeddings_at, model="fake-embedding", price_input_per_million="2.0"
        )
    fields.setdefault("name", "FAQ")
    fields.setdefault("fallback_answer", "抱歉，我没有找到答案，请联系人工客服。")
    return knowledge_base_save(base=KnowledgeBase(**fields))


def add_documents(base: KnowledgeBase, *names: str, tags=()) -> list[Document]:
    """The named FAQ files as documents of the base, indexed here (as the worker would)."""
    documents = [
        Document.objects.create(base=base, title=name, text=(FAQ / name).read_text(encoding="utf-8"), tags=list(tags))
        for name in names
    ]
    base_index(base_id=base.pk, document_ids=[d.pk for d in documents])
    return documents
