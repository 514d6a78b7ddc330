"""Knowledge search as a base grows: 1,000 / 10,000 / 100,000 chunks (issue 43 §3).

Each base is built with set-based SQL and kept between runs (a base named "scale-knowledge N"
with N chunks is reused): 512 distinct texts, each two chunks of the shipped FAQ, with their
term counts computed once in Python as the indexer computes them and a deterministic
768-dimension vector, are multiplied by INSERT … SELECT generate_series into documents of 100
chunks. Then the base's array files are removed and built again (timed: what the indexing task,
or a search's background thread, spends), and for keyword, vector and combined search over the
FAQ's 30 questions: the first search (which maps the built files) and p50/p95 of the searches
after it; a fresh process's memory after a search of each method; and indexing chunks per second
for a small document (cut, term counts, write; no embedding call, which is the model's time).
The query's vector is given (deterministic), so no model is called. `--python` also times the
Python path (every chunk read and scored in Python per search, what a search takes while the
arrays are built) on a few questions.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentry_scale REDIS_URL=redis://127.0.0.1:6379/9 \\
      .venv/bin/python -m bench.scale_knowledge --sizes 1000,10000,100000 [--python]
"""

import argparse
import json
import statistics
import time

import numpy as np
import orjson

from bench.stack import stack_prepare

SIZES = (1_000, 10_000, 100_000)
DIMENSIONS = 768
DISTINCT = 512
PER_DOCUMENT = 100
MODES = ("keyword", "vector", "combined")


def _faq_pieces() -> list[str]:
    from knowledge.chunking import chunk_text
    from knowledge.evaluation import FAQ

    return [
        piece
        for path in sorted(FAQ.glob("*.md"))
        for piece in chunk_text(path.read_text(encoding="utf-8"), size=300, overlap=30)
    ]


def _unit_vectors(count: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, DIMENSIONS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _distinct_rows() -> list[tuple[int, str, str, str]]:
    """(k, text, terms JSON, embedding JSON) of the distinct texts the bases repeat."""
    from knowledge.keyword import term_counts

    pieces = _faq_pieces()
    vectors = _unit_vectors(DISTINCT, seed=43)
    rows = []
    for k in range(DISTINCT):
        text = pieces[k % len(pieces)] + "\n\n" + pieces[(k * 7 + 3) % len(pieces)]
        rows.append(
            (
                k,
                text,
                orjson.dumps(term_counts(text), option=orjson.OPT_NON_STR_KEYS).decode(),
                orjson.dumps(vectors[k].tolist()).decode(),
            )
        )
    return rows


def _embedder():
    from agents.models import ModelConfig

    # Never called: the benchmark gives each query's vector. It only marks the base as embedded.
    config, _ = ModelConfig.objects.get_or_create(
        name="scale-knowledge embedder", defaults={"base_url": "http://127.0.0.1:9/v1", "model": "none"}
    )
    return config


def base_of_size(size: int):
    """The base of `size` chunks, built unless a previous run left it."""
    from django.db import connection, transaction

    from knowledge.models import Chunk, KnowledgeBase
    from knowledge.services import knowledge_base_save
    from workspaces.defaults import default_workspace_id

    name = f"scale-knowledge {size}"
    base = KnowledgeBase.objects.filter(workspace_id=default_workspace_id(), name=name).first()
    if base is not None and Chunk.objects.filter(document__base=base).count() == size:
        return base
    began = time.monotonic()
    with transaction.atomic():
        if base is not None:
            base.documents.all().delete()
        else:
            base = knowledge_base_save(base=KnowledgeBase(name=name, embedding_model=_embedder()))
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE TEMP TABLE scale_texts (k int, text text, terms jsonb, embedding jsonb) ON COMMIT DROP"
            )
            cursor.executemany("INSERT INTO scale_texts VALUES (%s, %s, %s, %s)", _distinct_rows())
            cursor.execute(
                """INSERT INTO knowledge_document (base_id, title, source, url, filename, tags, text, content_hash,
                       status, error, created_at, updated_at)
                   SELECT %s, 'doc ' || d, 'upload', '', '', '[]', '', '', 'indexed', '', now(), now()
                   FROM generate_series(0, %s) d""",
                [base.pk, size // PER_DOCUMENT - 1],
            )
            cursor.execute(
                """INSERT INTO knowledge_chunk (document_id, ordinal, text, terms, embedding)
                   SELECT d.id, o, t.text, t.terms, t.embedding
                   FROM knowledge_document d CROSS JOIN generate_series(0, %s) o
                   JOIN scale_texts t ON t.k = (substr(d.title, 5)::int * %s + o) %% %s
                   WHERE d.base_id = %s""",
                [PER_DOCUMENT - 1, PER_DOCUMENT, DISTINCT, base.pk],
            )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE knowledge_chunk")
    print(f"built a base of {size} chunks in {time.monotonic() - began:.1f} s")
    return base


def timed_ms(function) -> float:
    began = time.perf_counter()
    function()
    return (time.perf_counter() - began) * 1000


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _search_figures(base, mode: str, questions: list[str], *, python: bool) -> dict:
    from knowledge.retrieval import scored_chunks, search

    vectors = _unit_vectors(len(questions), seed=7)

    def one(i: int) -> None:
        # The Python path, what a search takes while the arrays are built, reads every chunk.
        chunks = scored_chunks(base=base, mode=mode) if python else None
        search(base=base, query=questions[i], top_k=3, mode=mode, chunks=chunks, query_vector=vectors[i].tolist())

    first = timed_ms(lambda: one(0))
    times = [timed_ms(lambda i=i: one(i)) for i in range(len(questions))]
    return {
        "first_ms": round(first, 1),
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(percentile(times, 0.95), 1),
    }


def indexing_rate() -> float:
    """Chunks per second indexing one small document (the FAQ's 21 files as one text)."""
    from django.db import transaction

    from knowledge.evaluation import FAQ
    from knowledge.models import Document, KnowledgeBase
    from knowledge.services import document_index, knowledge_base_save

    text = "\n\n".join(path.read_text(encoding="utf-8") for path in sorted(FAQ.glob("*.md")))
    rates = []
    with transaction.atomic():
        base = knowledge_base_save(base=KnowledgeBase(name="scale-knowledge indexing (rolled back)", chunk_size=300))
        document = Document.objects.create(base=base, title="faq", text=text)
        for _ in range(5):
            began = time.perf_counter()
            chunks = document_index(document=document)
            rates.append(chunks / (time.perf_counter() - began))
        transaction.set_rollback(True)
    return round(statistics.median(rates), 1)


def _memory_mb() -> dict:
    """This process's peak and private (anonymous) resident memory, MB: mapped array files are
    shared page cache, counted in the peak but not in the private figure."""
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    return {key: int(status[name].split()[0]) // 1024 for key, name in (("peak", "VmHWM"), ("private", "RssAnon"))}


def worker_memory(size: int) -> dict:
    """In a fresh process (a worker that never searched the base): one search per method over the
    arrays the host has, then its memory."""
    from knowledge import arrays
    from knowledge.evaluation import faq_questions
    from knowledge.retrieval import search

    base = base_of_size(size)
    question = faq_questions()[0]["question"]
    vector = _unit_vectors(1, seed=7)[0].tolist()
    for mode in MODES:
        search(base=base, query=question, top_k=3, mode=mode, query_vector=vector)
    assert arrays.base_arrays(base, parts=[arrays.postings_part(base.keyword_method), arrays.VECTORS])
    return _memory_mb()


def knowledge_curve(sizes=SIZES, *, python: bool = False, python_questions: int = 5) -> list[dict]:
    """One row per base size and method: the build of the base's arrays (what indexing, or the
    background thread of a search that found none, spends; searches take the Python path
    meanwhile), a fresh process's first search (which maps the built files) and p50/p95 of the
    searches after it, and the memory of a worker process that searched each method (measured in
    a process of its own). Indexing chunks per second is one figure, given on every row. Call
    after Django is set up."""
    import shutil
    import subprocess
    import sys

    from knowledge import arrays
    from knowledge.evaluation import faq_questions

    questions = [q["question"] for q in faq_questions()]
    rate = indexing_rate()
    rows = []
    for size in sizes:
        base = base_of_size(size)
        shutil.rmtree(arrays._version(base.pk, "").parent, ignore_errors=True)  # the base's files: a new host
        arrays.cache_clear()
        began = time.perf_counter()
        arrays.parts_build(base_id=base.pk, parts=[arrays.postings_part(base.keyword_method), arrays.VECTORS])
        build_s = round(time.perf_counter() - began, 1)
        arrays.cache_clear()  # the first search of each size maps the files, as a fresh worker would
        done = subprocess.run(
            [sys.executable, "-m", "bench.scale_knowledge", "--worker-memory", str(size)],
            capture_output=True,
            text=True,
            check=True,
        )
        memory = json.loads(done.stdout.splitlines()[-1])
        for mode in MODES:
            row = {"chunks": size, "method": mode, "path": "arrays", "index_chunks_per_s": rate}
            row |= {"build_s": build_s, "worker_peak_mb": memory["peak"], "worker_private_mb": memory["private"]}
            rows.append(row | _search_figures(base, mode, questions, python=False))
            if python:
                figures = _search_figures(base, mode, questions[:python_questions], python=True)
                rows.append(row | {"path": "python (the fallback while building)"} | figures)
    return rows


def _table(rows: list[dict]) -> str:
    lines = [
        "| chunks | method | path | arrays built in s | first search ms | p50 ms | p95 ms | indexing chunks/s "
        "| worker peak MB | worker private MB |"
    ]
    lines.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lines.append(
            f"| {r['chunks']:,} | {r['method']} | {r['path']} | {r['build_s']} | {r['first_ms']} | {r['p50_ms']} | "
            f"{r['p95_ms']} | {r['index_chunks_per_s']} | {r['worker_peak_mb']} | {r['worker_private_mb']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="chunk counts, comma-separated")
    parser.add_argument("--python", action="store_true", help="also time today's Python path")
    parser.add_argument("--python-questions", type=int, default=5, help="questions for the Python path")
    parser.add_argument("--worker-memory", type=int, help=argparse.SUPPRESS)  # the fresh process of knowledge_curve
    args = parser.parse_args()
    stack_prepare(script="bench.scale_knowledge", env={})
    if args.worker_memory:
        print(json.dumps(worker_memory(args.worker_memory)))
        return
    sizes = [int(size) for size in args.sizes.split(",")]
    print(_table(knowledge_curve(sizes, python=args.python, python_questions=args.python_questions)))


if __name__ == "__main__":
    main()
