"""A base's chunks as numpy arrays held in the worker process, so a search on PostgreSQL scores
them without reading every chunk again: the vectors as one float32 matrix, each keyword method's
term counts as postings (term -> rows and counts), both read once per process and base.

This is a cache of a base, not of a run. Each search reads one small statement, the base's
documents' ids, statuses and update stamps, and reloads the arrays when it changed: a chunk is
only written by `document_index`, which stamps its document in the same transaction, and a
status change or a deleted document changes the statement's answer too. The stamp is read
before the rows, so a change in between costs a reload on the next search, never a stale one.

The scores are the same BM25 and cosine as knowledge.keyword and knowledge.embeddings, computed
over the same chunks (the ones a filter leaves), so results equal the Python path's.
"""

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import orjson
from django.db import connection

from knowledge.models import KnowledgeBase

# A process keeps the arrays of this many bases (the ones searched last): 100,000 chunks with
# 768-dimension vectors hold about 310 MB (docs/knowledge.md).
CACHED_BASES = 4
FETCH = 2000

_STAMP = """
    SELECT md5(coalesce(string_agg(id::text || status || updated_at::text, ',' ORDER BY id), ''))
    FROM knowledge_document WHERE base_id = %s
"""
_ROWS = """
    SELECT c.id, c.document_id, {column}
    FROM knowledge_chunk c JOIN knowledge_document d ON d.id = c.document_id
    WHERE d.base_id = %s AND d.status = 'indexed'
    ORDER BY c.id
"""


@dataclass
class Postings:
    """One keyword method's term counts: the rows and counts of term t are
    rows[starts[t]:starts[t + 1]] and counts[...], rows ascending."""

    vocabulary: dict[str, int]
    starts: np.ndarray
    rows: np.ndarray
    counts: np.ndarray
    lengths: np.ndarray  # terms per row


@dataclass
class BaseArrays:
    stamp: str
    chunk_ids: np.ndarray  # ascending; row i is chunk chunk_ids[i]
    document_ids: np.ndarray
    vectors: np.ndarray | None = None  # rows x dimensions, float32; zero rows for chunks without one
    has_vector: np.ndarray | None = None
    postings: dict[str, Postings] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_cache: OrderedDict[int, BaseArrays] = OrderedDict()
_cache_lock = threading.Lock()


def supported() -> bool:
    """The arrays are read with PostgreSQL's SQL; the embedded SQLite keeps the Python path."""
    return connection.vendor == "postgresql"


def _stamp(base_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(_STAMP, [base_id])
        return cursor.fetchone()[0]


def _rows(base_id: int, column: str, params=()):
    # A server-side cursor: a large base's vectors do not fit in memory as Python text at once.
    with connection.chunked_cursor() as cursor:
        cursor.execute(_ROWS.format(column=column), [*params, base_id])
        while batch := cursor.fetchmany(FETCH):
            yield from batch


def _positions(arrays: BaseArrays, chunk_id: int) -> int | None:
    """The row of a chunk, None for one written after the ids were read (the stamp, read before
    them, has changed: the next search reloads)."""
    row = int(np.searchsorted(arrays.chunk_ids, chunk_id))
    return row if row < len(arrays.chunk_ids) and arrays.chunk_ids[row] == chunk_id else None


def _load(base_id: int, stamp: str) -> BaseArrays:
    ids, documents = [], []
    for chunk_id, document_id, _ in _rows(base_id, "NULL"):
        ids.append(chunk_id)
        documents.append(document_id)
    return BaseArrays(stamp, np.array(ids, dtype=np.int64), np.array(documents, dtype=np.int64))


def base_arrays(base: KnowledgeBase) -> BaseArrays:
    """The base's arrays, reloaded when its documents changed since they were read."""
    stamp = _stamp(base.pk)
    with _cache_lock:
        arrays = _cache.get(base.pk)
        if arrays is not None and arrays.stamp == stamp:
            _cache.move_to_end(base.pk)
            return arrays
    arrays = _load(base.pk, stamp)
    with _cache_lock:
        _cache[base.pk] = arrays
        _cache.move_to_end(base.pk)
        while len(_cache) > CACHED_BASES:
            _cache.popitem(last=False)
    return arrays


def _read_vectors(base_id: int, arrays: BaseArrays) -> None:
    vectors, has_vector = None, np.zeros(len(arrays.chunk_ids), dtype=bool)
    # Django reads jsonb as text: orjson parses it several times faster than json or numpy's text parser.
    for chunk_id, _, text in _rows(base_id, "c.embedding"):
        row = _positions(arrays, chunk_id)
        vector = orjson.loads(text) if row is not None and text else None
        if not vector:
            continue
        if vectors is None:
            vectors = np.zeros((len(arrays.chunk_ids), len(vector)), dtype=np.float32)
        if len(vector) == vectors.shape[1]:  # another length: a base re-indexing with a new model
            vectors[row] = vector
            has_vector[row] = True
    arrays.vectors, arrays.has_vector = vectors, has_vector


def postings_from(chunks, size: int) -> Postings:
    """Postings of (row, term counts) pairs, rows below `size`."""
    vocabulary: dict[str, int] = {}
    columns, rows, counts = [], [], []  # numpy arrays per chunk: Python ints per term would take GBs
    lengths = np.zeros(size, dtype=np.float64)
    for row, chunk_counts in chunks:
        if not chunk_counts:
            continue
        columns.append(np.fromiter((vocabulary.setdefault(t, len(vocabulary)) for t in chunk_counts), np.int32))
        counts.append(np.fromiter(chunk_counts.values(), np.float32))
        rows.append(np.full(len(chunk_counts), row, dtype=np.int32))
        lengths[row] = counts[-1].sum()
    columns_array = np.concatenate(columns) if columns else np.zeros(0, dtype=np.int32)
    order = np.argsort(columns_array, kind="stable")  # stable: each term's rows stay ascending
    starts = np.searchsorted(columns_array[order], np.arange(len(vocabulary) + 1))
    return Postings(
        vocabulary,
        starts,
        np.concatenate(rows)[order] if rows else np.zeros(0, dtype=np.int32),
        np.concatenate(counts)[order] if counts else np.zeros(0, dtype=np.float32),
        lengths,
    )


def _read_postings(base_id: int, arrays: BaseArrays, method: str) -> None:
    def chunks():
        for chunk_id, _, terms in _rows(base_id, "c.terms -> %s", [method]):
            row = _positions(arrays, chunk_id)
            if row is not None and terms:
                yield row, orjson.loads(terms)  # Django reads jsonb as text

    arrays.postings[method] = postings_from(chunks(), len(arrays.chunk_ids))


def vectors_of(base: KnowledgeBase, arrays: BaseArrays) -> BaseArrays:
    """The arrays with their vectors read (the first vector search of a process reads them)."""
    with arrays.lock:
        if arrays.has_vector is None:
            _read_vectors(base.pk, arrays)
    return arrays


def postings_of(base: KnowledgeBase, arrays: BaseArrays, method: str) -> Postings:
    with arrays.lock:
        if method not in arrays.postings:
            _read_postings(base.pk, arrays, method)
    return arrays.postings[method]


def bm25_scores(
    postings: Postings, query_terms: set[str], allowed: np.ndarray, *, k1: float = 1.5, b: float = 0.75
) -> np.ndarray:
    """knowledge.keyword.bm25 over the allowed rows: a score per row (0 where no term matched)."""
    scores = np.zeros(len(postings.lengths), dtype=np.float64)
    total = int(allowed.sum())
    if not total:
        return scores
    average = float(postings.lengths[allowed].sum()) / total or 1.0
    for term in query_terms:
        column = postings.vocabulary.get(term)
        if column is None:
            continue
        span = slice(postings.starts[column], postings.starts[column + 1])
        rows, counts = postings.rows[span], postings.counts[span]
        keep = allowed[rows]
        rows, counts = rows[keep], counts[keep]
        if not len(rows):
            continue
        idf = math.log(1 + (total - len(rows) + 0.5) / (len(rows) + 0.5))
        norm = k1 * (1 - b + b * postings.lengths[rows] / average)
        scores[rows] += idf * counts * (k1 + 1) / (counts + norm)
    return scores


def cache_clear() -> None:
    with _cache_lock:
        _cache.clear()
