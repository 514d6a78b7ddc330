"""Writes of the knowledge app: bases with their search tool, documents, indexing, searches."""

import hashlib
import logging

from celery import current_app
from django.db import transaction
from django.utils.text import slugify
from django.utils.translation import gettext as _

from conversations.models import Run
from knowledge import arrays
from knowledge.chunking import chunk_sections
from knowledge.embeddings import EmbeddingFailed, embed
from knowledge.extract import ExtractionFailed, url_fetch
from knowledge.keyword import term_counts
from knowledge.models import Chunk, Document, DocumentUpload, KnowledgeBase, KnowledgeSearch
from knowledge.parsing import sections_from_bytes_limited
from knowledge.retrieval import Passage
from knowledge.sections import Section, sections_from_outline, sections_join, sections_outline
from tools.models import ToolDefinition
from workspaces.defaults import default_workspace_id

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


def _tool_name(name: str, workspace_id: int) -> str:
    """A tool name for the base's search, free in its workspace (tool names are per workspace)."""
    stem = slugify(name).replace("-", "_")[:40] or hashlib.sha256(name.encode()).hexdigest()[:8]
    candidate, n = f"search_{stem}", 1
    while ToolDefinition.objects.filter(workspace_id=workspace_id, name=candidate).exists():
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
        # Saved without a workspace, the base joins the first (workspaces.defaults): its tool too.
        base.workspace_id = base.workspace_id or default_workspace_id()
        base.search_tool = ToolDefinition.objects.create(
            workspace_id=base.workspace_id,
            name=_tool_name(base.name, base.workspace_id),
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
    """Save a document whose text was set (or whose URL was) and queue its indexing; the worker
    fetches a URL document and replaces the chunks of either kind."""
    if document.source == Document.Source.URL:
        document.title = document.title or document.url[:300]
    document.status = Document.Status.PENDING
    document.error = ""
    with transaction.atomic():
        document.save()
        if document.source == Document.Source.URL:
            # A file left unread (one that failed) would otherwise be read instead of the URL.
            DocumentUpload.objects.filter(document=document).delete()
        base_index_enqueue(base=document.base, document_ids=[document.pk])
    return document


@transaction.atomic
def document_file_store(
    *, document: Document, data: bytes, filename: str, content_type: str, title_from_content: bool
) -> Document:
    """Save the document with the file just uploaded, replacing any file still unread, and
    queue its indexing: the worker reads the file (knowledge.parsing), nothing here parses it.
    With `title_from_content`, the document's title (the file name until then) becomes the one
    the worker finds in the file, if it finds one."""
    document.source = Document.Source.UPLOAD
    document.filename = filename[:300]
    document.status = Document.Status.PENDING
    document.error = ""
    document.save()
    DocumentUpload.objects.filter(document=document).delete()
    DocumentUpload.objects.create(
        document=document,
        filename=filename[:300],
        content_type=content_type[:200],
        data=data,
        size=len(data),
        title_from_content=title_from_content,
    )
    base_index_enqueue(base=document.base, document_ids=[document.pk])
    return document


def base_index_enqueue(*, base: KnowledgeBase, document_ids: list[int] | None = None) -> int:
    """Mark the documents (all of the base's when None) pending and index them on the worker."""
    documents = Document.objects.filter(base=base)
    if document_ids is not None:
        documents = documents.filter(pk__in=document_ids)
    ids = list(documents.values_list("pk", flat=True))
    documents.update(status=Document.Status.PENDING, error="")
    KnowledgeBase.objects.filter(pk=base.pk).update(status=KnowledgeBase.Status.INDEXING, last_error="")
    transaction.on_commit(lambda: current_app.send_task(BASE_INDEX_TASK, args=[base.pk, ids]))
    return len(ids)


def _content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _found_title(document: Document, found: str) -> str:
    """The title the document keeps: the one found in its content when it may take it, unless
    another document of the base already has that title."""
    found = found.strip()[:300]
    if not found or Document.objects.filter(base_id=document.base_id, title=found).exclude(pk=document.pk).exists():
        return document.title
    return found


def _outline(sections: list[Section]) -> list:
    # A text typed in (one section without a location) needs no outline to be cut again.
    return (
        [] if len(sections) == 1 and not sections[0].location and not sections[0].header else sections_outline(sections)
    )


def document_index(*, document: Document) -> int:
    """Read (an uploaded file, in a limited child process), fetch (a URL document), cut, index
    and embed the document, replacing its chunks in one transaction; the number of chunks.
    Raises ExtractionFailed or EmbeddingFailed."""
    base = document.base
    upload = DocumentUpload.objects.filter(document=document).first()
    title = document.title
    if upload is not None:
        found, sections = sections_from_bytes_limited(
            bytes(upload.data), filename=upload.filename, content_type=upload.content_type
        )
        if upload.title_from_content:
            title = _found_title(document, found)
    elif document.source == Document.Source.URL:
        body, path, content_type = url_fetch(document.url)
        found, sections = sections_from_bytes_limited(body, filename=path, content_type=content_type)
        if document.title == document.url[:300]:
            title = _found_title(document, found)
    else:
        sections = sections_from_outline(document.text, document.sections)
    text = sections_join(sections)
    located = chunk_sections(sections, size=base.chunk_size, overlap=base.chunk_overlap)
    if not located:
        raise ExtractionFailed(_("No text was found in the document."))
    pieces = [piece for _location, piece in located]
    vectors = (
        embed(pieces, config=base.embedding_model, base=base, document=document)
        if base.embedding_model_id
        else [None] * len(pieces)
    )
    terms = [term_counts(piece) for piece in pieces]  # before the row is locked: the slow part
    with transaction.atomic():
        current = Document.objects.select_for_update().filter(pk=document.pk).first()
        if current is None or (upload is not None and not DocumentUpload.objects.filter(pk=upload.pk).exists()):
            # Deleted, or uploaded again meanwhile: that upload's own indexing is queued.
            return 0
        Chunk.objects.filter(document=document).delete()
        Chunk.objects.bulk_create(
            Chunk(document=document, ordinal=i, text=piece, location=location, terms=counts, embedding=vector)
            for i, ((location, piece), counts, vector) in enumerate(zip(located, terms, vectors, strict=True))
        )
        document.text, document.title = text, title
        document.sections = _outline(sections)
        document.content_hash = _content_hash(text)
        document.status, document.error = Document.Status.INDEXED, ""
        fields = ["content_hash", "status", "error", "updated_at"]
        if upload is not None or document.source == Document.Source.URL:
            # Only what this indexing read: a text set meanwhile is indexed by its own task.
            fields += ["text", "title", "sections"]
        document.save(update_fields=fields)
        if upload is not None:
            upload.delete()
    return len(pieces)


def base_status_refresh(*, base_id: int) -> None:
    """The base's status from its documents: indexing while one is pending, failed (with each
    failed document's reason) when one failed, else ready."""
    documents = Document.objects.filter(base_id=base_id)
    failed = [
        f"{title}: {error}"
        for title, error in documents.filter(status=Document.Status.FAILED).values_list("title", "error").order_by("pk")
    ]
    if documents.filter(status=Document.Status.PENDING).exists():
        status = KnowledgeBase.Status.INDEXING
    else:
        status = KnowledgeBase.Status.FAILED if failed else KnowledgeBase.Status.READY
    KnowledgeBase.objects.filter(pk=base_id).update(status=status, last_error="\n".join(failed))


def base_index(*, base_id: int, document_ids: list[int]) -> None:
    """Index the documents one by one; a document that fails is marked failed with its reason
    and the others go on. The base's status then follows its documents."""
    base = KnowledgeBase.objects.select_related("embedding_model").get(pk=base_id)
    for document in Document.objects.filter(base=base, pk__in=document_ids).defer("text").order_by("pk"):
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
            Document.objects.filter(pk=document.pk).update(status=Document.Status.FAILED, error=error)
    base_arrays_build(base=base)  # first: a base shown ready is searched over its arrays on this host
    base_status_refresh(base_id=base.pk)


def base_arrays_build(*, base: KnowledgeBase) -> None:
    """Build the search arrays of the base's current version (knowledge.arrays), so the first
    search after indexing finds them on the host rather than scoring in Python meanwhile. A
    failure is logged, not the documents': the searches then build what they need."""
    if not arrays.supported():
        return
    parts = [arrays.postings_part(base.keyword_method)]
    if base.embedding_model_id is not None:
        parts.append(arrays.VECTORS)
    try:
        arrays.parts_build(base_id=base.pk, parts=parts)
    except Exception:
        log.exception("knowledge base %s: building its search arrays failed", base.pk)


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
                "location": p.location,
                "score": round(p.score, 6),
                "keyword_score": None if p.keyword_score is None else round(p.keyword_score, 6),
                "vector_score": None if p.vector_score is None else round(p.vector_score, 6),
            }
            for p in passages
        ],
    )
