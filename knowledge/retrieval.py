"""Finding a base's passages for a query: keyword (BM25), vector (cosine), or both fused.

Both lists are fused by reciprocal rank fusion (score = sum of 1 / (60 + rank)), which needs no
calibration between BM25 scores and cosine similarities. The threshold is on the base's own
scale: cosine similarity when the base has an embedding model, else the BM25 score.
"""

from dataclasses import dataclass

import numpy as np

from conversations.models import Run
from knowledge import arrays
from knowledge.embeddings import cosine, embed
from knowledge.keyword import TERMS, bm25
from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.sections import location_label
from knowledge.selectors import base_chunks

RRF_K = 60


class Mode:
    KEYWORD = "keyword"
    VECTOR = "vector"
    COMBINED = "combined"


@dataclass
class Passage:
    chunk: Chunk
    score: float
    keyword_score: float | None
    vector_score: float | None

    @property
    def location(self) -> str:
        """Where the passage is in its file ("page 3"), "" for a whole file."""
        return location_label(self.chunk.location)


def rrf(rankings: list[list[int]], *, k: int = RRF_K) -> list[tuple[int, float]]:
    """Fuse ranked lists of ids: (id, fused score), best first; ties by first appearance."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    order = {key: i for i, key in enumerate(dict.fromkeys(key for ranking in rankings for key in ranking))}
    return sorted(scores.items(), key=lambda item: (-item[1], order[item[0]]))


def search(
    *,
    base: KnowledgeBase,
    query: str,
    top_k: int = 3,
    mode: str | None = None,
    method: str | None = None,
    document_ids=None,
    tags=None,
    run: Run | None = None,
    chunks: list[Chunk] | None = None,
    query_vector: list[float] | None = None,
) -> list[Passage]:
    """The best `top_k` passages above the threshold. `mode` defaults to combined when the base
    has an embedding model, else keyword; `method` to the base's keyword method. On PostgreSQL
    the base's arrays are scored (knowledge.arrays); on SQLite, over the `chunks` given, or while
    the arrays of the base's current version are being built, each chunk is scored in Python.
    `query_vector`: the query's embedding when the caller has it (the scale benchmark), else the
    base's embedding model is asked for it."""
    if not query.strip():
        return []
    mode = mode or (Mode.COMBINED if base.embedding_model_id is not None else Mode.KEYWORD)
    method = method or base.keyword_method

    def query_embedding() -> list[float]:
        # Asked only once a search has chunks to score with it: an empty base costs no call.
        return query_vector or embed([query], config=base.embedding_model, base=base, run=run)[0]

    if chunks is None and arrays.supported():
        found = _search_arrays(
            base=base,
            query=query,
            top_k=top_k,
            mode=mode,
            method=method,
            allowed=_allowed(base, document_ids, tags),
            embedding=query_embedding,
        )
        if found is not None:
            return found
        # The arrays of this version of the base are being built: the Python path ranks the
        # same chunks the same way meanwhile, slower (docs/knowledge.md, Search at scale).
    if chunks is None:
        chunks = scored_chunks(base=base, mode=mode, document_ids=document_ids, tags=tags)
    return _search_chunks(
        base=base,
        query=query,
        top_k=top_k,
        mode=mode,
        method=method,
        chunks=chunks,
        embedding=query_embedding,
    )


def scored_chunks(*, base: KnowledgeBase, mode: str, document_ids=None, tags=None) -> list[Chunk]:
    """The chunks the Python path scores, with only the fields `mode` scores: a keyword search
    needs no vectors (3 KB a chunk at 768 dimensions), a vector search no terms."""
    vectors_on = base.embedding_model_id is not None and mode != Mode.KEYWORD
    without = () if vectors_on and mode == Mode.COMBINED else ("terms",) if vectors_on else ("embedding",)
    return base_chunks(base=base, document_ids=document_ids, tags=tags, without=without)


def _search_chunks(*, base, query, top_k, mode, method, chunks, embedding) -> list[Passage]:
    if not chunks:
        return []
    vectors_on = base.embedding_model_id is not None
    by_id = {chunk.pk: chunk for chunk in chunks}
    keyword: dict[int, float] = {}
    if mode in (Mode.KEYWORD, Mode.COMBINED):
        keyword = dict(bm25(query, [(c.pk, c.terms.get(method, {})) for c in chunks], method=method))
    vector: dict[int, float] = {}
    if mode in (Mode.VECTOR, Mode.COMBINED) and vectors_on:
        query_vector = embedding()
        vector = {c.pk: cosine(query_vector, c.embedding) for c in chunks if c.embedding}
    keyword_rank = list(keyword)  # bm25 returns best first
    vector_rank = [key for key, _ in sorted(vector.items(), key=lambda item: (-item[1], item[0]))]
    if mode == Mode.COMBINED:
        ranked = rrf([keyword_rank, vector_rank])
    elif mode == Mode.VECTOR:
        ranked = [(key, vector[key]) for key in vector_rank]
    else:
        ranked = [(key, keyword[key]) for key in keyword_rank]
    threshold = base.score_threshold
    passages = []
    for key, score in ranked:
        on_scale = vector.get(key, 0.0) if vectors_on and mode != Mode.KEYWORD else keyword.get(key, 0.0)
        if on_scale <= threshold:
            continue
        passages.append(Passage(by_id[key], score, keyword.get(key), vector.get(key)))
        if len(passages) == top_k:
            break
    return passages


def _allowed(base: KnowledgeBase, document_ids, tags) -> list[int] | None:
    """The documents a filter leaves (None: no filter), chosen as base_chunks chooses them."""
    if not document_ids and not tags:
        return None
    documents = Document.objects.filter(base=base)
    if document_ids:
        documents = documents.filter(pk__in=document_ids)
    wanted = set(tags or [])
    return [pk for pk, doc_tags in documents.values_list("pk", "tags") if not wanted or wanted & set(doc_tags or [])]


def _ranking(scores: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Rows present, best score first, ties by chunk id (rows are in chunk id order)."""
    rows = np.flatnonzero(present)
    return rows[np.lexsort((rows, -scores[rows]))]


def _search_arrays(*, base, query, top_k, mode, method, allowed, embedding) -> list[Passage] | None:
    """The Python path's ranking, computed over the base's arrays; None while they are built."""
    vectors_on = base.embedding_model_id is not None
    parts = [arrays.postings_part(method)] if mode in (Mode.KEYWORD, Mode.COMBINED) else []
    if mode in (Mode.VECTOR, Mode.COMBINED) and vectors_on:
        parts.append(arrays.VECTORS)
    base_rows = arrays.base_arrays(base, parts=parts)
    if base_rows is None:
        return None
    rows_allowed = np.ones(len(base_rows.chunk_ids), dtype=bool)
    if allowed is not None:
        rows_allowed = np.isin(base_rows.document_ids, allowed)
    if not rows_allowed.any():
        return []
    size = len(base_rows.chunk_ids)
    keyword, has_keyword = np.zeros(size), np.zeros(size, dtype=bool)
    if mode in (Mode.KEYWORD, Mode.COMBINED):
        keyword = arrays.bm25_scores(base_rows.postings[method], set(TERMS[method](query)), rows_allowed)
        has_keyword = keyword > 0
    vector, has_vector = np.zeros(size), np.zeros(size, dtype=bool)
    if mode in (Mode.VECTOR, Mode.COMBINED) and vectors_on:
        query_vector = np.asarray(embedding(), dtype=np.float32)
        # Vectors of another length (the base re-indexing with a new model) have no score yet.
        if base_rows.vectors is not None and base_rows.vectors.shape[1] == len(query_vector):
            has_vector = base_rows.has_vector & rows_allowed
            vector = (base_rows.vectors @ query_vector).astype(np.float64)
    keyword_rank, vector_rank = _ranking(keyword, has_keyword), _ranking(vector, has_vector)
    if mode == Mode.COMBINED:
        ranked, score = rrf_rows(keyword_rank, vector_rank, size)
    elif mode == Mode.VECTOR:
        ranked, score = vector_rank, vector
    else:
        ranked, score = keyword_rank, keyword
    on_scale = vector if vectors_on and mode != Mode.KEYWORD else keyword
    ranked = ranked[on_scale[ranked] > base.score_threshold][:top_k]
    return _passages(base_rows.chunk_ids, ranked, score, (keyword, has_keyword), (vector, has_vector))


def rrf_rows(keyword_rank: np.ndarray, vector_rank: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """rrf() over rankings of rows (arrays): fused scores and the rows ranked, ties by first appearance."""
    fused, appearance = np.zeros(size), np.full(size, np.inf)
    for offset, ranking in ((0, keyword_rank), (len(keyword_rank), vector_rank)):
        positions = np.arange(len(ranking))
        fused[ranking] += 1.0 / (RRF_K + positions + 1)
        appearance[ranking] = np.minimum(appearance[ranking], offset + positions)
    rows = np.flatnonzero(np.isfinite(appearance))
    return rows[np.lexsort((appearance[rows], -fused[rows]))], fused


def _passages(chunk_ids, ranked, score, keyword, vector) -> list[Passage]:
    ids = [int(chunk_ids[row]) for row in ranked]
    # Only the passages' rows are read: their terms and vectors are not needed.
    chunks = (
        Chunk.objects.select_related("document")
        .defer("document__text", "document__sections", "terms", "embedding")
        .in_bulk(ids)
    )
    (keyword_scores, has_keyword), (vector_scores, has_vector) = keyword, vector
    return [
        Passage(
            chunks[chunk_id],
            float(score[row]),
            float(keyword_scores[row]) if has_keyword[row] else None,
            float(vector_scores[row]) if has_vector[row] else None,
        )
        for row, chunk_id in zip(ranked, ids, strict=True)
        if chunk_id in chunks  # deleted since the arrays were read
    ]
