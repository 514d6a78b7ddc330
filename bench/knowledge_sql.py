"""Keyword search in PostgreSQL beside the numpy arrays, at 100,000 chunks (issue 43).

Candidates, each timed over the FAQ's 30 questions on the base bench.scale_knowledge builds and
reuses ("scale-knowledge N"), in the same process and run so their ratio holds on a busy machine:

- arrays: what ships, knowledge.retrieval.search in keyword mode (BM25 over this process's
  arrays of the base); its first search reads the arrays and is reported on its own line.
- PostgreSQL full-text search: a tsvector per chunk built, set-based in SQL, from the terms the
  indexer already stored (Chunk.terms[method], term -> count; each count becomes that many
  positions, since only counts are stored), kept in a side table with a GIN index. A question is
  cut by the same tokeniser (knowledge.keyword.TERMS), its terms OR-ed into a tsquery, ranked by
  ts_rank (and ts_rank_cd), top 5, restricted to the base's chunks, with the chunks' text and
  document read in the same query as the arrays path reads its passages.
- pg_trgm (`--trgm`): word_similarity of the question to the chunk text, GIN trigram index,
  threshold TRGM_THRESHOLD.

Latency: one warm-up search, then p50/p95 of the 30. Quality: hit@3 and MRR on the shipped FAQ
fixture, indexed as knowledge.evaluation indexes it (chunks of 300, overlap 30) into a base that
is rolled back, every candidate ranking all of its chunks as evaluation ranks them.

The side table (bench_knowledge_fts) and the indexes are the benchmark's own: no migration.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentry_h1 REDIS_URL=redis://127.0.0.1:6379/11 \\
      .venv/bin/python -m bench.knowledge_sql [--sizes 100000] [--trgm]
"""

import argparse
import statistics
import time

from bench.machine import describe, load_average
from bench.scale_knowledge import base_of_size, percentile, timed_ms
from bench.stack import stack_prepare

SIZES = (100_000,)
TOP_K = 5
# The default 0.6 keeps no chunk for most FAQ questions (a question shares few trigrams with a
# passage); 0.3 lets the index return candidates, and the ranking decides.
TRGM_THRESHOLD = 0.3
METHOD = "trigram"  # the default keyword method, the one the shipped figures are for
RANKINGS = {"ts_rank": "ts_rank(f.tsv, q, 1)", "ts_rank_cd": "ts_rank_cd(f.tsv, q, 1)"}

# A tsvector literal of a term-count dict: each term quoted verbatim (no parser, so CJK bigrams
# and "can't" stay as the tokeniser cut them), its count as positions 1..count (256 at most).
_SETUP = r"""
CREATE OR REPLACE FUNCTION bench_terms_tsvector(counts jsonb) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(string_agg(
    '''' || replace(replace(key, '\', '\\'), '''', '''''') || ''':'
      || array_to_string(ARRAY(SELECT generate_series(1, least(value::int, 256))), ','),
    ' '), '')::tsvector
  FROM jsonb_each_text(coalesce(counts, '{}'::jsonb))
$$;
CREATE TABLE IF NOT EXISTS bench_knowledge_fts (
  chunk_id bigint NOT NULL, method text NOT NULL, base_id bigint NOT NULL, tsv tsvector NOT NULL,
  PRIMARY KEY (chunk_id, method));
CREATE INDEX IF NOT EXISTS bench_knowledge_fts_tsv ON bench_knowledge_fts USING gin (tsv);
"""


def tsquery_lexeme(term: str) -> str:
    """A term as a quoted tsquery operand: inside quotes & | ! ( : are plain characters, and a
    quote or backslash is escaped, so no question can change the query's syntax."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def tsquery_text(terms: list[str]) -> str:
    """The question's terms OR-ed, each once in first-seen order; empty if it has none."""
    return " | ".join(tsquery_lexeme(term) for term in dict.fromkeys(terms) if term)


def fts_prepare(base, method: str = METHOD) -> None:
    """The base's chunks' tsvectors, added for those missing (a base's are kept between runs)."""
    from django.db import connection

    began = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(_SETUP)
        cursor.execute(
            """DELETE FROM bench_knowledge_fts f WHERE f.base_id = %s
               AND NOT EXISTS (SELECT 1 FROM knowledge_chunk c WHERE c.id = f.chunk_id)""",
            [base.pk],
        )
        cursor.execute(
            """INSERT INTO bench_knowledge_fts (chunk_id, method, base_id, tsv)
               SELECT c.id, %s, d.base_id, bench_terms_tsvector(c.terms -> %s)
               FROM knowledge_chunk c JOIN knowledge_document d ON d.id = c.document_id
               WHERE d.base_id = %s
               ON CONFLICT DO NOTHING""",
            [method, method, base.pk],
        )
        added = cursor.rowcount
        if added:
            cursor.execute("ANALYZE bench_knowledge_fts")
    if added > 1000:
        print(f"built {added} tsvectors for {base.name} in {time.monotonic() - began:.1f} s")


def fts_search(base, question: str, *, top_k: int, ranking: str = "ts_rank", method: str = METHOD) -> list[tuple]:
    """(chunk id, document title, text, rank) of the best `top_k` chunks, best first."""
    from django.db import connection

    from knowledge.keyword import TERMS

    query = tsquery_text(TERMS[method](question))
    if not query:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            f"""WITH ranked AS (
                  SELECT f.chunk_id, {RANKINGS[ranking]} AS rank
                  FROM bench_knowledge_fts f, CAST(%s AS tsquery) q
                  WHERE f.base_id = %s AND f.method = %s AND f.tsv @@ q
                  ORDER BY rank DESC, f.chunk_id LIMIT %s)
                SELECT r.chunk_id, d.title, c.text, r.rank
                FROM ranked r JOIN knowledge_chunk c ON c.id = r.chunk_id
                JOIN knowledge_document d ON d.id = c.document_id
                ORDER BY r.rank DESC, r.chunk_id""",
            [query, base.pk, method, top_k],
        )
        return cursor.fetchall()


def trgm_prepare() -> None:
    from django.db import connection

    began = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        cursor.execute(f"SET pg_trgm.word_similarity_threshold = {TRGM_THRESHOLD}")
        cursor.execute(
            "CREATE INDEX IF NOT EXISTS bench_knowledge_chunk_text_trgm"
            " ON knowledge_chunk USING gin (text gin_trgm_ops)"
        )
    print(f"pg_trgm index ready in {time.monotonic() - began:.1f} s")


def trgm_search(base, question: str, *, top_k: int) -> list[tuple]:
    """(chunk id, document title, text, similarity) by word_similarity of question to text."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT c.id, d.title, c.text, word_similarity(%s::text, c.text) AS rank
               FROM knowledge_chunk c JOIN knowledge_document d ON d.id = c.document_id
               WHERE d.base_id = %s AND %s::text <%% c.text
               ORDER BY rank DESC, c.id LIMIT %s""",
            [question, base.pk, question, top_k],
        )
        return cursor.fetchall()


def _latency(one, questions: list[str]) -> dict:
    first = timed_ms(lambda: one(questions[0]))
    times = [timed_ms(lambda q=q: one(q)) for q in questions]
    return {
        "first_ms": round(first, 1),
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(percentile(times, 0.95), 1),
    }


def _candidates(*, trgm: bool) -> dict:
    """name -> search(base, question, top_k) returning document titles, best first."""
    from knowledge.retrieval import Mode, search

    def arrays(base, question, top_k):
        passages = search(base=base, query=question, top_k=top_k, mode=Mode.KEYWORD, method=METHOD)
        return [p.chunk.document.title for p in passages]

    found = {"arrays (BM25, numpy)": arrays}
    for ranking in RANKINGS:
        found[f"PostgreSQL FTS, GIN, {ranking}"] = lambda base, question, top_k, ranking=ranking: [
            row[1] for row in fts_search(base, question, top_k=top_k, ranking=ranking)
        ]
    if trgm:
        found["pg_trgm word_similarity, GIN"] = lambda base, question, top_k: [
            row[1] for row in trgm_search(base, question, top_k=top_k)
        ]
    return found


def _document_rank(titles: list[str], document: str) -> int | None:
    from knowledge.evaluation import RANKED

    documents = list(dict.fromkeys(titles))[:RANKED]
    return documents.index(document) + 1 if document in documents else None


class _Rollback(Exception):
    pass


def fixture_quality(candidates: dict) -> dict:
    """name -> (hit@3, MRR) on the FAQ fixture, in a base rolled back as evaluation's is."""
    from django.db import transaction

    from knowledge.evaluation import _score, faq_load, faq_questions
    from knowledge.models import KnowledgeBase
    from knowledge.selectors import base_chunks
    from knowledge.services import knowledge_base_save

    quality = {}
    try:
        with transaction.atomic():
            base = knowledge_base_save(
                base=KnowledgeBase(
                    name="knowledge sql check (rolled back)", chunk_size=300, chunk_overlap=30, score_threshold=0
                )
            )
            faq_load(base=base)
            fts_prepare(base)
            size = len(base_chunks(base=base))
            for name, find in candidates.items():
                ranks = [_document_rank(find(base, q["question"], size), q["document"]) for q in faq_questions()]
                score = _score(name, ranks)
                quality[name] = (round(score.hit3, 2), round(score.mrr, 3))
            raise _Rollback
    except _Rollback:
        pass
    return quality


def measure(sizes, *, trgm: bool = False) -> list[dict]:
    from knowledge import arrays
    from knowledge.evaluation import faq_questions

    questions = [q["question"] for q in faq_questions()]
    candidates = _candidates(trgm=trgm)
    if trgm:
        trgm_prepare()
    quality = fixture_quality(candidates)
    rows = []
    for size in sizes:
        base = base_of_size(size)
        fts_prepare(base)
        # The host's arrays, built if missing (indexing builds them); the first search maps them.
        arrays.parts_build(base_id=base.pk, parts=[arrays.postings_part(METHOD)])
        arrays.cache_clear()
        for name, find in candidates.items():
            figures = _latency(lambda q, find=find, base=base: find(base, q, TOP_K), questions)
            rows.append({"chunks": size, "candidate": name} | figures | dict(zip(("hit3", "mrr"), quality[name])))
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| chunks | candidate | first search ms | p50 ms | p95 ms | p95 ÷ arrays | hit@3 | MRR |"]
    lines.append("|---:|---|---:|---:|---:|---:|---:|---:|")
    arrays_p95 = {r["chunks"]: r["p95_ms"] for r in rows if r["candidate"].startswith("arrays")}
    for r in rows:
        ratio = r["p95_ms"] / arrays_p95[r["chunks"]] if arrays_p95.get(r["chunks"]) else float("nan")
        lines.append(
            f"| {r['chunks']:,} | {r['candidate']} | {r['first_ms']} | {r['p50_ms']} | {r['p95_ms']} | "
            f"{ratio:.1f}× | {r['hit3']:.2f} | {r['mrr']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="chunk counts, comma-separated")
    parser.add_argument("--trgm", action="store_true", help="also pg_trgm similarity over chunk text")
    args = parser.parse_args()
    stack_prepare(script="bench.knowledge_sql", env={})
    rows = measure([int(size) for size in args.sizes.split(",")], trgm=args.trgm)
    print(f"Machine: {describe()}; load average {load_average()}; top {TOP_K}, keyword method {METHOD}")
    print(table(rows))


if __name__ == "__main__":
    main()
