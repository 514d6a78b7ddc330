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


def test_the_check_scores_every_method_on_the_fake_embeddings_and_leaves_nothing(fake_llm):
    out = io.StringIO()
    call_command("agentry_retrieval_check", stdout=out)
    scores = _scores(out.getvalue())
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
    assert not KnowledgeBase.objects.exists() and not LLMCall.objects.exists()
    assert not ModelConfig.objects.exists()


def test_a_named_embedding_config_is_used_and_an_unknown_one_refused(fake_llm):
    ModelConfigFactory(name="embedder", base_url=fake_llm.api_base, model="fake-embedding")
    out = io.StringIO()
    call_command("agentry_retrieval_check", "--embedding-model-config", "embedder", stdout=out)
    assert "vector" in _scores(out.getvalue())
    with pytest.raises(CommandError, match="No model config is named nope"):
        call_command("agentry_retrieval_check", "--embedding-model-config", "nope")


def test_keyword_only():
    out = io.StringIO()
    call_command("agentry_retrieval_check", "--no-vectors", stdout=out)
    assert set(_scores(out.getvalue())) == {"keyword: jieba + BM25", "keyword: trigram + BM25"}
