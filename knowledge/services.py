"""Writes of the knowledge app: bases with their search tool, documents, indexing, searches."""

import hashlib
import logging

from celery import current_app
from django.db import transaction
from django.db.models import F
from django.utils.text import slugify
from django.utils.translation import gettext as _

from conversations.models import Run
from knowledge.chunking import chunk_text
from knowledge.embeddings import EmbeddingFailed, embed
from knowledge.extract import ExtractionFailed, text_from_url
from knowledge.keyword import term_counts
from knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeSearch
from knowledge.retrieval import Passage
from tools.models import ToolDefinition

log = logging.getLogger(__name__)

# Sent by name: the task module calls these services, so they cannot import it.
BASE_INDEX_TASK = "knowledge.tasks.base_index_task"

SEARCH_PARAMETERS = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "What to look up."},
        "top_k": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3, "description": "Passages wanted."},
        "document_ids": {
            "type": "array",
            "items": {"type": "integer"},
            "maxItems": 50,
            "description": "Only search these documents.",
        },
        "tags": {
            "type": "array",
            "items": {"type": "string", "maxLength": 100},
            "maxItems": 20,
            "description": "Only search documents with one of these tags.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}


def _tool_name(name: str) -> str:
    stem = slugify(name).replace("-", "_")[:40] or hashlib.sha256(name.encode()).hexdigest()[:8]
    candidate, n = f"search_{stem}", 1
    while ToolDefinition.objects.filter(name=candidate).exists():
        n += 1
        candidate = f"search_{stem}_{n}"
    return candidate


def _tool_description(base: KnowledgeBase) -> str:
    return (
        f"Search the knowledge base “{base.name}”"
        + (f" ({base.description.strip()})" if base.description.strip() else "")
        + ". Returns passages with citation ids such as [C12]; answer from them and cite the ids you used."
    )


@transaction.atomic
def knowledge_base_save(*, base: KnowledgeBase) -> KnowledgeBase:
    """Save the base, creating its search tool on first save and keeping its description current."""
    if base.search_tool_id is None:
        base.search_tool = ToolDefinition.objects.create(
            name=_tool_name(base.name),
            description=_tool_description(base),
            parameters=SEARCH_PARAMETERS,
            kind=ToolDefinition.Kind.KNOWLEDGE,
            side_effect=ToolDefinition.SideEffect.READ,
            idempotent=True,
        )
    else:
        ToolDefinition.objects.filter(pk=base.search_tool_id).update(description=_tool_description(base))
    base.save()
    return base


def document_upload(*, document: Document) -> Document:
    """Save a document whose text was just uploaded (or whose URL was set) and queue its
    indexing; the worker fetches a URL document and replaces the chunks of either kind."""
    if document.source == Document.Source.URL:
        document.title = document.title or document.url[:300]
    document.status = Document.Status.PENDING
    document.error = ""
    document.save()
    base_index_enqueue(base=document.base, document_ids=[document.pk])
    return document


def base_index_enqueue(*, base: KnowledgeBase, document_ids: list[int] | None = None) -> int:
    """Mark the documents (all of the base's when None) pending and index them on the worker."""
    documents = Document.objects.filter(base=base)
    if document_ids is not None:
        documents = documents.filter(pk__in=document_ids)
    ids = list(documents.values_list("pk", flat=True))
    documents.update(status=Document.Status.PENDING, error="")
    KnowledgeBase.objects.filter(pk=base.pk).update(
        status=KnowledgeBase.Status.INDEXING, indexed_documents=0, total_documents=len(ids), last_error=""
    )
    transaction.on_commit(lambda: current_app.send_task(BASE_INDEX_TASK, args=[base.pk, ids]))
    return len(ids)


def _content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def document_index(*, document: Document) -> int:
    """Fetch (URL documents), cut, index and embed the document, replacing its chunks in one
    transaction; the number of chunks. Raises ExtractionFailed or EmbeddingFailed."""
    base = document.base
    if document.source == Document.Source.URL:
        title, text = text_from_url(document.url)
        document.text = text
        if title and document.title == document.url[:300]:
            document.title = title[:300]
    pieces = chunk_text(document.text, size=base.chunk_size, overlap=base.chunk_overlap)
    if not pieces:
        raise ExtractionFailed(_("No text was found in the document."))
    vectors = (
        embed(pieces, config=base.embedding_model, base=base, document=document)
        if base.embedding_model_id
        else [None] * len(pieces)
    )
    with transaction.atomic():
        Chunk.objects.filter(document=document).delete()
        Chunk.objects.bulk_create(
            Chunk(document=document, ordinal=i, text=piece, terms=term_counts(piece), embedding=vector)
            for i, (piece, vector) in enumerate(zip(pieces, vectors, strict=True))
        )
        document.content_hash = _content_hash(document.text)
        document.status, document.error = Document.Status.INDEXED, ""
        # Only what indexing decides: an upload's text may have been replaced meanwhile (its own
        # indexing is queued behind this one).
        fields = ["content_hash", "status", "error", "updated_at"]
        if document.source == Document.Source.URL:
            fields += ["text", "title"]
        document.save(update_fields=fields)
    return len(pieces)


def base_index(*, base_id: int, document_ids: list[int]) -> None:
    """Index the documents one by one, counting progress on the base; a document that fails is
    marked failed with its error and the others go on."""
    base = KnowledgeBase.objects.select_related("embedding_model").get(pk=base_id)
    errors = []
    for document in Document.objects.filter(base=base, pk__in=document_ids).order_by("pk"):
        document.base = base
        try:
            document_index(document=document)
        except (ExtractionFailed, EmbeddingFailed) as exc:
            log.warning("knowledge document %s could not be indexed: %s", document.pk, exc)
            error = str(exc)
        except Exception as exc:  # recorded on the document, so the base does not stay "indexing"
            log.exception("knowledge document %s: indexing failed", document.pk)
            error = _("Unexpected error: %(error)r") % {"error": exc}
        else:
            error = ""
        if error:
            errors.append(f"{document.title}: {error}")
            Document.objects.filter(pk=document.pk).update(status=Document.Status.FAILED, error=error)
        KnowledgeBase.objects.filter(pk=base.pk).update(indexed_documents=F("indexed_documents") + 1)
    KnowledgeBase.objects.filter(pk=base.pk).update(
        status=KnowledgeBase.Status.FAILED if errors else KnowledgeBase.Status.READY, last_error="\n".join(errors)
    )


def knowledge_search_record(
    *,
    base: KnowledgeBase,
    run: Run,
    tool_call_id: str,
    query: str,
    top_k: int,
    filters: dict,
    passages: list[Passage],
    handed_off: bool = False,
) -> KnowledgeSearch:
    return KnowledgeSearch.objects.create(
        base=base,
        run=run,
        tool_call_id=tool_call_id,
        query=query,
        top_k=top_k,
        filters=filters,
        fallback=not passages,
        handed_off=handed_off,
        passages=[
            {
                "citation": f"C{p.chunk.pk}",
                "chunk": p.chunk.pk,
                "document": p.chunk.document_id,
                "title": p.chunk.document.title,
                "score": round(p.score, 6),
                "keyword_score": None if p.keyword_score is None else round(p.keyword_score, 6),
                "vector_score": None if p.vector_score is None else round(p.vector_score, 6),
            }
            for p in passages
        ],
    )
