from django.db.models import Prefetch

from knowledge.models import Chunk, KnowledgeBase, KnowledgeSearch


def base_chunks(*, base: KnowledgeBase, document_ids=None, tags=None, without=()) -> list[Chunk]:
    """The base's indexed chunks, optionally only those of the given documents or tags; the
    fields in `without` (terms, embedding) left unread, for a search that does not score them.

    Tags are matched in Python: JSON containment is not available on SQLite, and a base's
    documents are few."""
    # A document's whole text is not needed to rank its chunks, and would be read once per chunk.
    chunks = (
        Chunk.objects.filter(document__base=base, document__status="indexed")
        .select_related("document")
        .defer("document__text", "document__sections", *without)
    )
    if document_ids:
        chunks = chunks.filter(document_id__in=document_ids)
    rows = list(chunks.order_by("document_id", "ordinal"))
    if tags:
        wanted = set(tags)
        rows = [chunk for chunk in rows if wanted & set(chunk.document.tags or [])]
    return rows


def citations_of(searches) -> list[dict]:
    """What these searches of a run returned, in order: the passages its answer may cite.
    Takes the searches (with their base) so a list of runs can prefetch them."""
    citations = []
    for search in searches:
        for passage in search.passages:
            citations.append(
                {
                    "citation": passage["citation"],
                    "knowledge_base": search.base.name,
                    "document": passage["document"],
                    "title": passage["title"],
                    # Searches recorded before locations were kept have none.
                    "location": passage.get("location", ""),
                    "chunk": passage["chunk"],
                    "score": passage["score"],
                    "tool_call_id": search.tool_call_id,
                }
            )
    return citations


def run_citations(*, run_id) -> list[dict]:
    return citations_of(KnowledgeSearch.objects.filter(run_id=run_id).select_related("base"))


def searches_prefetch() -> Prefetch:
    """A run's searches in order, with their base: for citations_of over a list of runs."""
    return Prefetch("knowledge_searches", queryset=KnowledgeSearch.objects.select_related("base"))
