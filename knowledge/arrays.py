"""A base's chunks as numpy arrays, so a search on PostgreSQL scores them without reading every
chunk again: the vectors as one float32 matrix, each keyword method's term counts as postings
(term -> rows and counts).

The arrays are files under the var directory, one directory per base version
(`<var>/knowledge-arrays/<database>/<base id>/<stamp>/<part>/`, parts as knowledge.array_build
lists them), written once per version by whoever builds them and renamed into place when
complete, and read with np.load(mmap_mode="r"): the processes of a host share one copy in the
page cache instead of each holding its own. A version is built by the indexing that made it
(base_index, on the worker) and, for a part a search needs that is not there (a new host, another
keyword method), in a background thread of the process that searched. A search never waits for
a build: until its parts are there it takes the Python path (knowledge.retrieval), which scores
the same chunks the same way, only slower.

Each search reads one small statement, the base's stamp (knowledge.array_build.stamp_read), and
uses the version of that stamp. A build reads the stamp and the rows in one REPEATABLE READ
snapshot and writes nothing if the stamp moved meanwhile, so a version's files are always those
of its stamp. Inside a transaction of the caller's (the test suite, the retrieval check, which
roll back) the rows may be uncommitted: the arrays are then kept in this process's memory only.

The scores are the same BM25 and cosine as knowledge.keyword and knowledge.embeddings, computed
over the same chunks (the ones a filter leaves), so results equal the Python path's.
"""

import contextlib
import fcntl
import logging
import math
import shutil
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
from django.conf import settings
from django.db import connection, transaction

from knowledge import array_build
from knowledge.models import KnowledgeBase

log = logging.getLogger(__name__)

# A process keeps the arrays of this many bases (the ones searched last); mapped, not copied.
CACHED_BASES = 4
IDS, VECTORS = "ids", "vectors"


def postings_part(method: str) -> str:
    return f"postings-{method}"


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
    chunk_ids: np.ndarray | None = None  # ascending; row i is chunk chunk_ids[i]
    document_ids: np.ndarray | None = None
    vectors: np.ndarray | None = None  # rows x dimensions, float32; zero rows for chunks without one
    has_vector: np.ndarray | None = None
    postings: dict[str, Postings] = field(default_factory=dict)

    def has(self, part: str) -> bool:
        if part == IDS:
            return self.chunk_ids is not None
        if part == VECTORS:
            return self.has_vector is not None
        return part.removeprefix("postings-") in self.postings


_cache: OrderedDict[int, BaseArrays] = OrderedDict()
_cache_lock = threading.Lock()
_building: set[tuple[int, str, str]] = set()  # (base id, stamp, part) built by a thread of this process


def supported() -> bool:
    """The arrays are read with PostgreSQL's SQL; the embedded SQLite keeps the Python path."""
    return connection.vendor == "postgresql"


def _root() -> Path:
    # Per database: two installations (or test databases) sharing a var directory never mix.
    return Path(settings.VAR_DIR) / "knowledge-arrays" / str(connection.settings_dict["NAME"])


def _version(base_id: int, stamp: str) -> Path:
    return _root() / str(base_id) / stamp


def _load(path: Path, mmap: bool) -> np.ndarray:
    # A plain ndarray over the mapped file: np.memmap's subclass hooks cost on every operation.
    return np.asarray(np.load(path, mmap_mode="r" if mmap else None))


def _part_load(arrays: BaseArrays, part: str, folder: Path, *, mmap: bool) -> None:
    if part == IDS:
        arrays.chunk_ids = _load(folder / "chunk_ids.npy", mmap)
        arrays.document_ids = _load(folder / "document_ids.npy", mmap)
    elif part == VECTORS:
        arrays.has_vector = _load(folder / "has_vector.npy", mmap)
        if (folder / "vectors.npy").exists():
            arrays.vectors = _load(folder / "vectors.npy", mmap)
    else:
        terms = orjson.loads((folder / "vocabulary.json").read_bytes())
        loaded = {name: _load(folder / f"{name}.npy", mmap) for name in ("starts", "rows", "counts", "lengths")}
        arrays.postings[part.removeprefix("postings-")] = Postings({t: i for i, t in enumerate(terms)}, **loaded)


def _part_write(part: str, folder: Path, chunk_ids: np.ndarray) -> None:
    if part == VECTORS:
        array_build.vectors_write(folder, chunk_ids)
    else:
        array_build.postings_write(folder, chunk_ids, part.removeprefix("postings-"), postings_from)


@contextlib.contextmanager
def _snapshot():
    """One REPEATABLE READ transaction of its own (True), or the caller's transaction (False)."""
    if connection.in_atomic_block:
        yield False
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield True


@contextlib.contextmanager
def _host_lock(base_id: int, *, wait: bool):
    """The host's lock on building the base (a file lock: one process builds, across processes);
    yields False when another holds it and `wait` is False."""
    folder = _root() / str(base_id)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


def parts_build(*, base_id: int, parts: list[str], stamp: str | None = None, wait: bool = True) -> BaseArrays | None:
    """Build the base's missing parts (IDS always) for its current version and put them in this
    process's cache; None if the base changed from `stamp` before the build read it, or if
    another process of the host is building the base and not `wait`."""
    with _host_lock(base_id, wait=wait) as locked:
        if not locked:
            return None
        return _parts_build(base_id, parts, stamp)


def _parts_build(base_id: int, parts: list[str], stamp: str | None) -> BaseArrays | None:
    with _snapshot() as own:
        current = array_build.stamp_read(base_id)
        if stamp is not None and current != stamp:
            return None
        version = _version(base_id, current)
        (version if own else version.parent).mkdir(parents=True, exist_ok=True)
        arrays = BaseArrays(current)
        for part in [IDS, *(p for p in dict.fromkeys(parts) if p != IDS)]:
            if own and (version / part).is_dir():
                _part_load(arrays, part, version / part, mmap=True)
                continue
            scratch = version.parent / f".{part}-{uuid.uuid4().hex}"
            scratch.mkdir()
            try:
                if part == IDS:
                    array_build.ids_write(scratch, *array_build.ids_read(base_id))
                else:
                    _part_write(part, scratch, arrays.chunk_ids)
                if own:
                    with contextlib.suppress(OSError):  # another process renamed its copy first
                        scratch.rename(version / part)
                    _part_load(arrays, part, version / part, mmap=True)
                else:
                    _part_load(arrays, part, scratch, mmap=False)  # uncommitted: this process only
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    if own:
        _versions_prune(base_id, keep=current)
    _cache_put(base_id, arrays)
    return arrays


def _versions_prune(base_id: int, *, keep: str) -> None:
    # A process still mapping an older version keeps its pages (Linux frees them at unmap).
    for old in (_root() / str(base_id)).iterdir():
        if old.name != keep and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)


def _cache_put(base_id: int, arrays: BaseArrays) -> None:
    with _cache_lock:
        cached = _cache.get(base_id)
        if cached is not None and cached.stamp == arrays.stamp:  # keep parts another search loaded
            cached.postings = {**cached.postings, **arrays.postings}
            for name in ("chunk_ids", "document_ids", "vectors", "has_vector"):
                if getattr(arrays, name) is not None:
                    setattr(cached, name, getattr(arrays, name))
            arrays = cached
        _cache[base_id] = arrays
        _cache.move_to_end(base_id)
        while len(_cache) > CACHED_BASES:
            _cache.popitem(last=False)


def _build_soon(base_id: int, stamp: str, parts: list[str]) -> None:
    """Build the parts in a thread of this process, unless this process or another (the lock
    file) builds them already."""
    keys = {(base_id, stamp, part) for part in parts}
    with _cache_lock:
        if keys & _building:
            return
        _building.update(keys)

    def work():
        try:
            # Not waiting: when another process of the host builds the base, its files will do.
            parts_build(base_id=base_id, parts=parts, stamp=stamp, wait=False)
        except Exception:
            log.exception("knowledge base %s: building its search arrays failed", base_id)
        finally:
            with _cache_lock:
                _building.difference_update(keys)
            connection.close()

    threading.Thread(target=work, name=f"knowledge-arrays-{base_id}", daemon=True).start()


def base_arrays(base: KnowledgeBase, *, parts: list[str]) -> BaseArrays | None:
    """The base's arrays with `parts` (and IDS), from this process's cache or the host's files;
    None while they are not there yet, their build started in the background."""
    stamp = array_build.stamp_read(base.pk)
    with _cache_lock:
        arrays = _cache.get(base.pk)
        if arrays is None or arrays.stamp != stamp:
            arrays = BaseArrays(stamp)
    version = _version(base.pk, stamp)
    missing = []
    for part in [IDS, *parts]:
        if arrays.has(part):
            continue
        try:
            _part_load(arrays, part, version / part, mmap=True)
        except OSError:  # not built yet, or an older version pruned as this search read it
            missing.append(part)
    _cache_put(base.pk, arrays)
    if missing:
        _build_soon(base.pk, stamp, parts)
        return None
    return arrays


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
