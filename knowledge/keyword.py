"""Keyword search for Chinese and English: two ways of cutting text into terms, one BM25.

- jieba: Chinese cut into words by jieba's dictionary (search mode, so long words also give
  their shorter parts), English words lower-cased; stop words and punctuation dropped.
- trigram: overlapping character trigrams of each run of CJK characters (bigrams and single
  characters too, so two-character questions still match), English words lower-cased.

BM25 is computed here in Python over the chunks given, from the term counts stored at indexing:
the search path on SQLite and for long-term memories, fine for a few thousand chunks. On
PostgreSQL a base is searched with the same BM25 over numpy arrays (knowledge.arrays).
"""

import logging
import math
import re
from collections import Counter

import jieba

from knowledge.models import KeywordMethod

jieba.setLogLevel(logging.WARNING)

_TOKENS = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+|[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")

STOP_WORDS = frozenset(
    "a an and are as at be by can do does for from how i in is it my of on or the to what when where which "
    "will with you your me we our if i'm have has can't not 的 了 吗 呢 是 我 你 在 和 有 吧 啊 怎么 什么 "
    "如何 可以 能 要 请问 一下 这个 那个 就 都 也 会 还 把 被 给".split()
)


def _english(word: str) -> str:
    # The lightest stemming that helps an FAQ: plurals and possessives.
    word = word.lower().replace("’", "'").removesuffix("'s")
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _jieba_terms(text: str) -> list[str]:
    terms = []
    for match in _TOKENS.finditer(text):
        token = match.group()
        if _CJK.match(token):
            terms.extend(word for word in jieba.lcut_for_search(token) if word not in STOP_WORDS)
        elif token.lower() not in STOP_WORDS and _english(token) not in STOP_WORDS:
            terms.append(_english(token))
    return terms


def _trigram_terms(text: str) -> list[str]:
    terms = []
    for match in _TOKENS.finditer(text):
        token = match.group()
        if _CJK.match(token):
            for n in (1, 2, 3):
                terms.extend(token[i : i + n] for i in range(len(token) - n + 1) if token[i : i + n] not in STOP_WORDS)
        elif token.lower() not in STOP_WORDS and _english(token) not in STOP_WORDS:
            terms.append(_english(token))
    return terms


TERMS = {KeywordMethod.JIEBA: _jieba_terms, KeywordMethod.TRIGRAM: _trigram_terms}


def term_counts(text: str) -> dict[str, dict[str, int]]:
    """What a chunk stores: its term counts under each method."""
    return {method: dict(Counter(cut(text))) for method, cut in TERMS.items()}


def bm25(
    query: str, documents: list[tuple[int, dict[str, int]]], *, method: str, k1: float = 1.5, b: float = 0.75
) -> list[tuple[int, float]]:
    """(id, score) of the documents that share a term with the query, best first."""
    if not documents:
        return []
    query_terms = set(TERMS[method](query))
    lengths = {key: sum(counts.values()) for key, counts in documents}
    average = sum(lengths.values()) / len(documents) or 1.0
    frequency = Counter(term for _, counts in documents for term in counts if term in query_terms)
    total = len(documents)
    scores = []
    for key, counts in documents:
        score = 0.0
        for term in query_terms:
            tf = counts.get(term, 0)
            if not tf:
                continue
            idf = math.log(1 + (total - frequency[term] + 0.5) / (frequency[term] + 0.5))
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[key] / average))
        if score > 0:
            scores.append((key, score))
    scores.sort(key=lambda item: (-item[1], item[0]))
    return scores
