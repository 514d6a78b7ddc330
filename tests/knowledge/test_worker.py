import pytest

from conversations.models import Run
from conversations.services import conversation_create
from engine.admission import message_post
from knowledge.models import Document, KnowledgeSearch
from knowledge.services import base_index_enqueue
from tests.knowledge.helpers import FAQ, add_documents, make_base, search_script
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def test_reindexing_runs_on_the_worker_and_counts_progress(worker, fake_llm):
    base = make_base(embeddings_at=fake_llm.api_base)
    for name in ("zh-returns.md", "en-returns.md"):
        Document.objects.create(base=base, title=name, text=(FAQ / name).read_text(encoding="utf-8"))
    Document.objects.create(base=base, title="intranet", source="url", url="http://10.0.0.1/faq")

    assert base_index_enqueue(base=base) == 3

    def finished():
        base.refresh_from_db()
        return base.status != "indexing"

    wait_for(finished, timeout=60, message="the base to be indexed")
    assert base.status == "failed"
    assert "intranet" in base.last_error
    statuses = dict(base.documents.values_list("title", "status"))
    assert statuses == {"zh-returns.md": "indexed", "en-returns.md": "indexed", "intranet": "failed"}
    assert all(c.embedding for d in base.documents.filter(status="indexed") for c in d.chunks.all())


def test_a_worker_runs_the_search_tool_in_its_engine_loop(worker, fake_llm):
    base = make_base(embeddings_at=fake_llm.api_base)
    add_documents(base, "zh-returns.md", "zh-refund.md")
    tool = base.search_tool.name
    model = ModelConfigFactory(
        base_url=fake_llm.api_base, model=fake_llm.script("kb-worker", search_script(tool, "退货几天"))
    )
    agent = make_agent(tools=[tool], model_config=model)
    run = message_post(conversation=conversation_create(agent=agent), content="退货几天？")

    wait_for(lambda: Run.objects.get(pk=run.pk).is_terminal, timeout=60, message="the run to end")
    run.refresh_from_db()
    assert run.status == "completed"
    search = KnowledgeSearch.objects.get(run=run)
    assert search.passages and search.passages[0]["title"] == "zh-returns.md"
