"""Retrieval quality on the shipped bilingual FAQ (fixtures/faq): hit@1, hit@3 and MRR; and
hit@3 per file format on the office files and scans of knowledge.format_set.

The FAQ is indexed into a throw-away base inside a transaction that is rolled back at the end,
so a check leaves nothing behind (not even its embedding calls). A question is answered by one
document; a method's ranking of chunks is read as a ranking of documents (first appearance).
The format set's files are read as uploads are, by the worker's limited child (OCR included),
into a base that holds the FAQ too, so the FAQ's documents compete with them.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from agents.models import ModelConfig
from knowledge.format_set import format_documents, format_questions
from knowledge.models import Document, DocumentUpload, KeywordMethod, KnowledgeBase
from knowledge.retrieval import Mode, search
from knowledge.selectors import base_chunks
from knowledge.services import document_index, knowledge_base_save

FAQ = Path(__file__).resolve().parent / "fixtures" / "faq"
RANKED = 10


@dataclass
class FormatScore:
    format: str
    questions: int
    hit3: dict[str, float]  # method name → hit@3


@dataclass
class Score:
    name: str
    hit1: float
    hit3: float
    mrr: float


def faq_questions() -> list[dict]:
    return json.loads((FAQ / "questions.json").read_text(encoding="utf-8"))


def faq_load(*, base: KnowledgeBase) -> None:
    for path in sorted(FAQ.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        document = Document.objects.create(base=base, title=path.name, text=text, filename=path.name)
        document_index(document=document)


class _Rollback(Exception):
    pass


def _score(name: str, ranks: list[int | None]) -> Score:
    total = len(ranks) or 1
    return Score(
        name,
        hit1=sum(1 for r in ranks if r == 1) / total,
        hit3=sum(1 for r in ranks if r is not None and r <= 3) / total,
        mrr=sum(1 / r for r in ranks if r is not None) / total,
    )


def formats_load(*, base: KnowledgeBase) -> None:
    """The format set's files as uploaded documents of the base, read and indexed as the worker does."""
    for _format, name, data in format_documents():
        document = Document.objects.create(base=base, title=name, filename=name)
        DocumentUpload.objects.create(document=document, filename=name, data=data, size=len(data))
        document_index(document=document)


def _methods(embedding_model) -> list[tuple[str, str, str]]:
    runs = [("keyword: jieba + BM25", Mode.KEYWORD, KeywordMethod.JIEBA)]
    runs.append(("keyword: trigram + BM25", Mode.KEYWORD, KeywordMethod.TRIGRAM))
    if embedding_model is not None:
        runs.append(("vector", Mode.VECTOR, KeywordMethod.JIEBA))
        runs.append(("combined (RRF): jieba + vector", Mode.COMBINED, KeywordMethod.JIEBA))
        runs.append(("combined (RRF): trigram + vector", Mode.COMBINED, KeywordMethod.TRIGRAM))
    return runs


def _throwaway_base(embedding_model, chunk_size: int, chunk_overlap: int) -> KnowledgeBase:
    if embedding_model is not None and embedding_model.pk is None:
        embedding_model.save()  # a throw-away config (the fake server's), rolled back too
    return knowledge_base_save(
        base=KnowledgeBase(
            name="retrieval check (rolled back)",
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            embedding_model=embedding_model,
            score_threshold=0,
        )
    )


def _forget_if_saved_here(embedding_model, unsaved: bool) -> None:
    # Its row was rolled back: the next check saves it again.
    if unsaved:
        embedding_model.pk = None
        embedding_model._state.adding = True


def _rank(base, size: int, question: dict, *, mode: str, method: str) -> int | None:
    # The search an agent runs (on PostgreSQL, over the arrays of knowledge.arrays), ranking all.
    passages = search(base=base, query=question["question"], top_k=size, mode=mode, method=method)
    documents = list(dict.fromkeys(p.chunk.document.title for p in passages))[:RANKED]
    return documents.index(question["document"]) + 1 if question["document"] in documents else None


def retrieval_check(
    *, embedding_model: ModelConfig | None, chunk_size: int = 300, chunk_overlap: int = 30
) -> list[Score]:
    """Scores of keyword (jieba, trigram), and with an embedding model vector and combined.
    An unsaved `embedding_model` is saved inside the rolled-back transaction."""
    questions, scores = faq_questions(), []
    unsaved = embedding_model is not None and embedding_model.pk is None
    try:
        with transaction.atomic():
            base = _throwaway_base(embedding_model, chunk_size, chunk_overlap)
            faq_load(base=base)
            size = len(base_chunks(base=base))
            for name, mode, method in _methods(embedding_model):
                ranks = [_rank(base, size, q, mode=mode, method=method) for q in questions]
                scores.append(_score(name, ranks))
            raise _Rollback
    except _Rollback:
        pass
    finally:
        _forget_if_saved_here(embedding_model, unsaved)
    return scores


def format_check(
    *, embedding_model: ModelConfig | None, chunk_size: int = 300, chunk_overlap: int = 30
) -> list[FormatScore]:
    """hit@3 of each method on each format's questions (knowledge.format_set), over a base that
    holds the format set and the FAQ. An unsaved `embedding_model` is saved inside the
    rolled-back transaction."""
    questions, scores = format_questions(), []
    unsaved = embedding_model is not None and embedding_model.pk is None
    try:
        with transaction.atomic():
            base = _throwaway_base(embedding_model, chunk_size, chunk_overlap)
            faq_load(base=base)
            formats_load(base=base)
            size = len(base_chunks(base=base))
            methods = _methods(embedding_model)
            ranks = {
                name: [_rank(base, size, q, mode=mode, method=method) for q in questions]
                for name, mode, method in methods
            }
            for kind in dict.fromkeys(q["format"] for q in questions):
                asked = [i for i, q in enumerate(questions) if q["format"] == kind]
                hit3 = {name: _score(name, [ranks[name][i] for i in asked]).hit3 for name, _m, _k in methods}
                scores.append(FormatScore(kind, len(asked), hit3))
            raise _Rollback
    except _Rollback:
        pass
    finally:
        _forget_if_saved_here(embedding_model, unsaved)
    return scores
