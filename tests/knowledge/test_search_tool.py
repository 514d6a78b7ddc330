"""The search tool in real runs: the fake model calls it, the engine runs it."""

import pytest

from conversations.models import LLMCall, ToolInvocation
from conversations.services import conversation_create
from knowledge.models import KnowledgeSearch
from tests.knowledge.helpers import add_documents, make_base, search_script
from tests.support.api import client_for
from tests.support.factories import make_user
from tests.support.runs import ask, last_answer

pytestmark = pytest.mark.e2e


def test_the_agent_searches_cites_and_the_api_returns_the_citations(scripted_agent, fake_llm):
    base = make_base(embeddings_at=fake_llm.api_base)
    [returns, _] = add_documents(base, "zh-returns.md", "en-returns.md")
    tool = base.search_tool.name
    agent = scripted_agent(search_script(tool, "几天内可以退货", top_k=2), tools=[tool])
    owner = make_user()
    run = ask(agent, "买的东西不想要了，几天内可以退？", conversation_create(agent=agent, owner=owner))

    assert run.status == "completed"
    search = KnowledgeSearch.objects.get(run=run)
    invocation = ToolInvocation.objects.get(run=run)
    assert search.tool_call_id == invocation.tool_call_id and search.query == "几天内可以退货"
    assert search.top_k == 2 and len(search.passages) == 2 and not search.fallback
    first = search.passages[0]
    assert first["document"] == returns.pk and first["citation"] == f"C{first['chunk']}"
    assert f"\n[{first['citation']}] zh-returns.md" in invocation.result and "七天内" in invocation.result
    assert last_answer(run) == f"七天内可以无理由退货 [{first['citation']}]"
    # The query's embedding is a call of the run, beside its model steps.
    assert LLMCall.objects.filter(run=run, purpose="embedding", status="succeeded").count() == 1

    response = client_for(owner).get(f"/api/v1/runs/{run.pk}/")
    body = response.json()
    assert response.status_code == 200, body
    assert body["citations"][0] == {
        "citation": first["citation"],
        "knowledge_base": "FAQ",
        "document": returns.pk,
        "title": "zh-returns.md",
        "location": "",
        "chunk": first["chunk"],
        "score": first["score"],
        "tool_call_id": invocation.tool_call_id,
    }
    listed = client_for(owner).get("/api/v1/runs/").json()["results"]
    assert listed[0]["citations"] == body["citations"]


def test_nothing_above_the_threshold_answers_the_fallback(scripted_agent):
    # The query shares a character or two with the passage (天, 么): a weak BM25 score, below 2.
    base = make_base(score_threshold=2.0)
    add_documents(base, "zh-returns.md")
    tool = base.search_tool.name
    agent = scripted_agent(search_script(tool, "火星上的天气怎么样"), tools=[tool])
    run = ask(agent, "火星上的天气怎么样")

    assert run.status == "completed"
    assert last_answer(run) == base.fallback_answer
    search = KnowledgeSearch.objects.get(run=run)
    assert search.fallback and search.passages == []


def test_arguments_outside_the_schema_are_refused_before_any_search(scripted_agent):
    base = make_base()
    add_documents(base, "zh-returns.md")
    tool = base.search_tool.name
    agent = scripted_agent(search_script(tool, "退货", top_k=99, extra="x"), tools=[tool])
    run = ask(agent, "退货")

    invocation = ToolInvocation.objects.filter(run=run).first()
    assert invocation.status == "error" and "top_k" in invocation.result
    assert not KnowledgeSearch.objects.filter(run=run).exists()


def test_the_runs_admin_page_shows_its_searches(scripted_agent, admin_client):
    base = make_base()
    add_documents(base, "zh-returns.md")
    tool = base.search_tool.name
    run = ask(scripted_agent(search_script(tool, "几天内可以退货"), tools=[tool]), "退货")
    page = admin_client.get(f"/admin/conversations/run/{run.pk}/change/").content.decode()
    assert "几天内可以退货" in page and "zh-returns.md" in page
