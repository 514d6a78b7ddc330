"""Reading a base's chunks from PostgreSQL into the files of knowledge.arrays, one part at a time:

- `ids`: chunk_ids.npy (ascending; row i is chunk chunk_ids[i]) and document_ids.npy;
- `vectors`: vectors.npy (rows x dimensions, float32, zero rows for chunks without a vector)
  and has_vector.npy;
- `postings-<method>`: one keyword method's postings (knowledge.arrays.Postings): vocabulary.json
  (the terms in column order), starts.npy, rows.npy, counts.npy, lengths.npy.

The chunk ids are read first, then a part's column in pages of those ids, each page a statement
of its own, so no cursor lives on the connection between statements (PgBouncer's transaction
pooling keeps none). The caller holds them in one snapshot (knowledge.arrays.parts_build), so
every part of a version has the same rows in the same order.
"""

from pathlib import Path

import numpy as np
import orjson
from django.db import connection

PAGE = 2000

STAMP_SQL = """
    SELECT md5(coalesce(string_agg(id::text || status || updated_at::text, ',' ORDER BY id), ''))
    FROM knowledge_document WHERE base_id = %s
"""
_IDS = """
    SELECT c.id, c.document_id
    FROM knowledge_chunk c JOIN knowledge_document d ON d.id = c.document_id
    WHERE d.base_id = %s AND d.status = 'indexed'
    ORDER BY c.id
"""
# A page by its chunk ids: the primary key finds exactly these rows, and only theirs are decoded
# (a page "after the last id, LIMIT n" over a join made PostgreSQL sort, and decode, the whole base
# again for each page).
_PAGE = "SELECT c.id, {column} FROM knowledge_chunk c WHERE c.id = ANY(%s) ORDER BY c.id"


def stamp_read(base_id: int) -> str:
    """A digest of the base's documents' ids, statuses and update stamps: a chunk is only written
    by document_index, which stamps its document in the same transaction, so the base's chunks
    changed exactly when this did."""
    with connection.cursor() as cursor:
        cursor.execute(STAMP_SQL, [base_id])
        return cursor.fetchone()[0]


def _pages(column: str, chunk_ids: np.ndarray, params=()):
    for start in range(0, len(chunk_ids), PAGE):
        with connection.cursor() as cursor:
            cursor.execute(_PAGE.format(column=column), [*params, chunk_ids[start : start + PAGE].tolist()])
            yield from cursor.fetchall()


def ids_read(base_id: int) -> tuple[np.ndarray, np.ndarray]:
    with connection.cursor() as cursor:
        cursor.execute(_IDS, [base_id])
        rows = np.array(cursor.fetchall(), dtype=np.int64).reshape(-1, 2)
    return np.ascontiguousarray(rows[:, 0]), np.ascontiguousarray(rows[:, 1])


def ids_write(folder: Path, chunk_ids: np.ndarray, document_ids: np.ndarray) -> None:
    np.save(folder / "chunk_ids.npy", chunk_ids)
    np.save(folder / "document_ids.npy", document_ids)


def vectors_write(folder: Path, chunk_ids: np.ndarray) -> None:
    """The vectors written straight into their file (a memory map), so the builder never holds
    the matrix and its text at once."""
    vectors, has_vector = None, np.zeros(len(chunk_ids), dtype=bool)
    # Django reads jsonb as text: orjson parses it several times faster than json or numpy's text parser.
    for row, (chunk_id, text) in enumerate(_pages("c.embedding", chunk_ids)):
        assert chunk_ids[row] == chunk_id  # one snapshot: the same rows as the ids part
        vector = orjson.loads(text) if text else None
        if not vector:
            continue
        if vectors is None:
            vectors = np.lib.format.open_memmap(
                folder / "vectors.npy", mode="w+", dtype=np.float32, shape=(len(chunk_ids), len(vector))
            )
        if len(vector) == vectors.shape[1]:  # another length: a base re-indexing with a new model
            vectors[row] = vector
            has_vector[row] = True
    if vectors is not None:
        vectors.flush()
        del vectors
    np.save(folder / "has_vector.npy", has_vector)


def postings_write(folder: Path, chunk_ids: np.ndarray, method: str, postings_from) -> None:
    def chunks():
        for row, (chunk_id, terms) in enumerate(_pages("c.terms -> %s", chunk_ids, [method])):
            assert chunk_ids[row] == chunk_id
            if terms:
                yield row, orjson.loads(terms)  # Django reads jsonb as text

    postings = postings_from(chunks(), len(chunk_ids))
    (folder / "vocabulary.json").write_bytes(orjson.dumps(list(postings.vocabulary)))
    for name in ("starts", "rows", "counts", "lengths"):
        np.save(folder / f"{name}.npy", getattr(postings, name))
