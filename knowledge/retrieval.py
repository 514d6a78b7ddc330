"""Finding a base's passages for a query: keyword (BM25), vector (cosine), or both fused.

Both lists are fused by reciprocal rank fusion (score = sum of 1 / (60 + rank)), which needs no
calibration between BM25 scores and cosine similarities. The threshold is on the base's own
scale: cosine similarity when the base has an embedding model, else the BM25 score.
"""

from dataclasses import dataclass

from conversations.models import Run
from knowledge.embeddings import cosine, embed
from knowledge.keyword import bm25
from knowledge.models import Chunk, KnowledgeBase
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
) -> list[Passage]:
    """The best `top_k` passages above the threshold. `mode` defaults to combined when the base
    has an embedding model, else keyword; `method` to the base's keyword method."""
    if chunks is None:
        chunks = base_chunks(base=base, document_ids=document_ids, tags=tags)
    if not chunks or not query.strip():
        return []
    vectors_on = base.embedding_model_id is not None
    mode = mode or (Mode.COMBINED if vectors_on else Mode.KEYWORD)
    by_id = {chunk.pk: chunk for chunk in chunks}
    keyword: dict[int, float] = {}
    if mode in (Mode.KEYWORD, Mode.COMBINED):
        method = method or base.keyword_method
        keyword = dict(bm25(query, [(c.pk, c.terms.get(method, {})) for c in chunks], method=method))
    vector: dict[int, float] = {}
    if mode in (Mode.VECTOR, Mode.COMBINED) and vectors_on:
        [query_vector] = embed([query], config=base.embedding_model, base=base, run=run)
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
