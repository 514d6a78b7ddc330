import io
import re

import pytest
from django.core.management import CommandError, call_command

from agents.models import ModelConfig
from conversations.models import LLMCall
from knowledge.models import KnowledgeBase
from tests.support.factories import ModelConfigFactory

pytestmark = pytest.mark.django_db


def _scores(output: str) -> dict[str, tuple[float, float, float]]:
    rows = re.findall(r"^(.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", output, re.MULTILINE)
    return {name.strip(): tuple(map(float, numbers)) for name, *numbers in rows}


def _formats(output: str) -> dict[str, tuple[int, list[float]]]:
    table = output.split("hit@3 per file format", 1)[1].splitlines()[2:]
    rows = [re.match(r"^(.+?)\s+(\d+)\s+([\d.\s]+)$", line).groups() for line in table if line.strip()]
    return {name.strip(): (int(count), [float(x) for x in hits.split()]) for name, count, hits in rows}


def test_the_check_scores_every_method_on_the_fake_embeddings_and_leaves_nothing(fake_llm):
    out = io.StringIO()
    call_command("agentry_retrieval_check", stdout=out)
    faq = out.getvalue().split("hit@3 per file format", 1)[0]
    scores = _scores(faq)
    assert "30 questions" in out.getvalue()
    assert set(scores) == {
        "keyword: jieba + BM25",
        "keyword: trigram + BM25",
        "vector",
        "combined (RRF): jieba + vector",
        "combined (RRF): trigram + vector",
    }
    # The figures of docs/knowledge.md: trigrams retrieve best on the shipped FAQ.
    assert scores["keyword: trigram + BM25"] == (0.73, 0.87, 0.813)
    assert all(hit1 <= hit3 and 0 < mrr <= 1 for hit1, hit3, mrr in scores.values())
    # A row per format, each of its questions answered by one of the set's files, read by the
    # worker's limited child (OCR for the scans): the figures of docs/knowledge.md.
    rows = _formats(out.getvalue())
    assert list(rows) == ["docx", "xlsx", "pptx", "csv", "image", "scanned pdf"]
    assert all(count == 4 and len(hits) == 5 for count, hits in rows.values())
    assert [hits[1] for _count, hits in rows.values()] == [1.0] * 6  # trigram keyword search
    assert not KnowledgeBase.objects.exists() and not LLMCall.objects.exists()
    assert not ModelConfig.objects.exists()


def test_a_named_embedding_config_is_used_and_an_unknown_one_refused(fake_llm):
    ModelConfigFactory(name="embedder", base_url=fake_llm.api_base, model="fake-embedding")
    out = io.StringIO()
    call_command("agentry_retrieval_check", "--embedding-model-config", "embedder", "--no-formats", stdout=out)
    assert "vector" in _scores(out.getvalue())
    with pytest.raises(CommandError, match="No model config is named nope"):
        call_command("agentry_retrieval_check", "--embedding-model-config", "nope")


def test_keyword_only():
    out = io.StringIO()
    call_command("agentry_retrieval_check", "--no-vectors", "--no-formats", stdout=out)
    assert "per file format" not in out.getvalue()
    assert set(_scores(out.getvalue())) == {"keyword: jieba + BM25", "keyword: trigram + BM25"}
