"""Vector search of long-term memories: with a memory embedding model, statements are embedded
as they are written, a search embeds its query and fuses the cosine ranking with the keyword
ones, every embedding call is an LLMCall row of the run; a failing endpoint loses no memory and
leaves the keyword search; without a model, not one statement more than before.

The fake model server's embeddings are hashed character n-grams (fakellm/embeddings.py): they
know spelling, not meaning. So "close in meaning" is built from what they do see and the keyword
search does not: English words that share character trigrams but not a word ("vegetarian" and
"vegan" share "#ve", "veg", "ega"), which BM25 over whole words never matches."""

import json
import logging

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agents.models import ModelConfig
from agents.services import agent_version_current
from agents.snapshot import MemorySnapshot, ModelSnapshot, snapshot_build
from conversations.models import Conversation, LLMCall, Message
from conversations.services import conversation_create
from engine.memory import memories_recall, memory_extract
from engine.snapshots import version_snapshot
from knowledge.embeddings import BATCH
from knowledge.keyword import term_counts
from memory.models import Memory, MemoryUse
from memory.services import (
    MemoryProposal,
    memory_apply,
    memory_correct,
    memory_embedding_model,
    memory_search,
)
from tests.engine.test_memory_recall import extractions  # noqa: F401 (a fixture)
from tests.memory.test_agent_settings import _form
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tests.support.ledger import ledger_run
from tests.support.llm import assert_totals_match_calls
from tests.support.runs import advance, start_run
from workspaces.defaults import default_workspace_id

pytestmark = pytest.mark.django_db

SCOPE = "agent:1"
KINDS = ["fact", "preference", "event", "instruction"]
QUERY = "Any vegetarian dinner ideas?"
# Oldest first: the right memory is the oldest, so the newest-first fill puts it last.
STATEMENTS = ["Is vegan", "Lives in Chengdu", "Works as a night nurse", "Allergic to peanuts"]


@pytest.fixture
def embedder(fake_llm) -> ModelConfig:
    return ModelConfigFactory(base_url=fake_llm.api_base, model="fake-embedding", price_input_per_million="2.0")


@pytest.fixture
def run():
    return ledger_run(make_agent())


def _remember(owner, *statements, embedding_model=None, run=None):
    """Each statement added by its own apply, oldest first."""
    for statement in statements:
        memory_apply(
            workspace_id=default_workspace_id(),
            scope=SCOPE,
            owner_id=owner.pk,
            end_user="u1",
            proposals=[MemoryProposal("add", "fact", statement)],
            source="extraction",
            kinds=KINDS,
            ttl_days=None,
            run=run,
            embedding_model=embedding_model,
        )


def _search(owner, query=QUERY, limit=1, workspace_id=None, **options) -> list[str]:
    found = memory_search(
        workspace_id=workspace_id or default_workspace_id(),
        scope=SCOPE,
        owner_id=owner.pk,
        end_user="u1",
        query=query,
        limit=limit,
        **options,
    )
    return [memory.statement for memory in found]


def _embedding_calls(run):
    return list(LLMCall.objects.filter(run=run, purpose="embedding").order_by("iteration"))


def test_a_query_close_by_embedding_ranks_its_memory_first_only_with_an_embedding_model(owner, embedder, run):
    _remember(owner, *STATEMENTS, embedding_model=embedder, run=run)

    # No word in common: keyword search finds nothing, and the newest fill the place.
    assert _search(owner) == ["Allergic to peanuts"]
    assert _search(owner, embedding_model=embedder, run=run) == ["Is vegan"]
    # A keyword match still counts: both rankings are fused.
    assert _search(owner, query="peanuts for dinner?", embedding_model=embedder, run=run) == ["Allergic to peanuts"]


def test_each_apply_embeds_its_statements_in_one_call_of_the_run_and_a_search_its_query(owner, embedder, run):
    memory_apply(
        workspace_id=default_workspace_id(),
        scope=SCOPE,
        owner_id=owner.pk,
        end_user="u1",
        proposals=[MemoryProposal("add", "fact", "Is vegan"), MemoryProposal("add", "preference", "Likes tea")],
        source="extraction",
        kinds=KINDS,
        ttl_days=None,
        run=run,
        embedding_model=embedder,
    )
    [written] = _embedding_calls(run)
    assert written.status == "succeeded" and written.request["input"] == ["Is vegan", "Likes tea"]
    assert written.model_config == embedder and written.total_tokens > 0 and written.cost > 0
    vegan = Memory.objects.get(statement="Is vegan")
    assert vegan.embedding["model"] == f"{embedder.pk}:fake-embedding" and len(vegan.embedding["vector"]) == 256

    # An update embeds the new statement, and only it.
    memory_apply(
        workspace_id=default_workspace_id(),
        scope=SCOPE,
        owner_id=owner.pk,
        end_user="u1",
        proposals=[MemoryProposal("update", "fact", "Is vegetarian", memory_id=str(vegan.pk))],
        source="extraction",
        kinds=KINDS,
        ttl_days=None,
        run=run,
        embedding_model=embedder,
    )
    _search(owner, embedding_model=embedder, run=run)

    first, updated, searched = _embedding_calls(run)
    assert (updated.iteration, updated.request["input"]) == (2, ["Is vegetarian"])
    assert (searched.iteration, searched.request["input"]) == (3, [QUERY])
    vegan.refresh_from_db()
    assert vegan.embedding["vector"] != Memory.objects.get(statement="Likes tea").embedding["vector"]


def test_an_apply_embeds_before_it_takes_the_end_users_lock_and_the_call_counts_on_the_run(owner, embedder, run):
    """A slow embedding endpoint holds no lock: the statements are embedded (the call's row
    completed) before the transaction that takes the end user's lock; the call's tokens and cost
    are on the run's totals."""
    with CaptureQueriesContext(connection) as applied:
        memory_apply(
            workspace_id=default_workspace_id(),
            scope=SCOPE,
            owner_id=owner.pk,
            end_user="u1",
            proposals=[MemoryProposal("add", "fact", "Is vegan")],
            source="extraction",
            kinds=KINDS,
            ttl_days=None,
            run=run,
            embedding_model=embedder,
        )
    statements = [query["sql"] for query in applied.captured_queries]
    locked = next(index for index, sql in enumerate(statements) if "pg_advisory_xact_lock" in sql)
    embedded = max(
        index for index, sql in enumerate(statements) if sql.startswith(f'UPDATE "{LLMCall._meta.db_table}"')
    )
    assert embedded < locked
    assert Memory.objects.get().embedding["model"] == f"{embedder.pk}:fake-embedding"
    [call] = _embedding_calls(run)
    run.refresh_from_db()
    assert (run.total_tokens, run.prompt_tokens, run.cost) == (call.total_tokens, call.prompt_tokens, call.cost)
    assert call.total_tokens > 0 and call.cost > 0


def test_memories_without_a_vector_of_this_model_are_embedded_by_the_next_search(owner, embedder, run):
    _remember(owner, *STATEMENTS)  # before the agent named an embedding model
    other = ModelConfigFactory(base_url=embedder.base_url, model="other-embedding")
    Memory.objects.filter(statement="Lives in Chengdu").update(embedding={"model": f"{other.pk}:x", "vector": [1.0]})
    assert Memory.objects.filter(embedding__isnull=True).count() == 3

    assert _search(owner, embedding_model=embedder, run=run) == ["Is vegan"]

    [call] = _embedding_calls(run)
    # One call: the query, then the statements (newest first) that lacked this model's vector.
    assert call.request["input"] == [QUERY, *reversed(STATEMENTS)]
    assert all(m.embedding["model"] == f"{embedder.pk}:fake-embedding" for m in Memory.objects.all())
    before = list(Memory.objects.order_by("-updated_at").values_list("statement", flat=True))
    assert before == list(reversed(STATEMENTS))  # being embedded makes no memory newer

    _search(owner, embedding_model=embedder, run=run)
    assert _embedding_calls(run)[-1].request["input"] == [QUERY]


def test_a_search_embeds_at_most_one_batch_of_missing_vectors_and_the_next_the_rest(owner, embedder, run):
    statements = [f"Fact {n}" for n in range(70)]
    Memory.objects.bulk_create(
        Memory(
            workspace_id=default_workspace_id(),
            scope=SCOPE,
            owner=owner,
            end_user="u1",
            kind="fact",
            statement=text,
            terms=term_counts(text),
        )
        for text in statements
    )

    assert len(_search(owner, limit=5, embedding_model=embedder, run=run)) == 5
    assert Memory.objects.filter(embedding__isnull=True).count() == 70 - (BATCH - 1)
    _search(owner, limit=5, embedding_model=embedder, run=run)

    first, second = _embedding_calls(run)
    assert (len(first.request["input"]), len(second.request["input"])) == (BATCH, 1 + 70 - (BATCH - 1))
    assert not Memory.objects.filter(embedding__isnull=True).exists()


def test_a_correction_clears_the_vector_of_the_old_statement(owner, embedder, run):
    _remember(owner, "Is vegan", embedding_model=embedder, run=run)
    memory = Memory.objects.get()

    memory_correct(memory=memory, statement="Eats fish", changed_by=make_user(staff=True))

    memory.refresh_from_db()
    assert memory.statement == "Eats fish" and memory.embedding is None


def test_a_failing_endpoint_still_stores_the_memory_and_searches_by_keyword(owner, run, caplog):
    # Port 9 (discard) is closed on the test machine: the connection is refused at once.
    closed = ModelConfigFactory(base_url="http://127.0.0.1:9/v1", model="fake-embedding")
    caplog.set_level(logging.WARNING, logger="memory.services")

    _remember(owner, *STATEMENTS, embedding_model=closed, run=run)

    assert Memory.objects.count() == 4 and not Memory.objects.filter(embedding__isnull=False).exists()
    assert "memories stored without vectors" in caplog.text
    assert _search(owner, query="peanuts for dinner?", embedding_model=closed, run=run) == ["Allergic to peanuts"]
    assert _search(owner, embedding_model=closed, run=run) == ["Allergic to peanuts"]  # the newest
    assert "memory search by keyword only" in caplog.text
    calls = _embedding_calls(run)
    assert len(calls) == 6 and {call.status for call in calls} == {"failed"}
    assert "could not be reached" in calls[0].error


def test_an_endpoint_answering_an_error_or_no_vectors_is_a_failure_too(owner, fake_llm, run):
    # The fake server answers 404 for an unknown path: an endpoint that is no embeddings endpoint.
    wrong = ModelConfigFactory(base_url=fake_llm.base_url + "/nothing", model="fake-embedding")

    _remember(owner, "Is vegan", embedding_model=wrong, run=run)

    assert Memory.objects.get().embedding is None
    assert _search(owner, embedding_model=wrong, run=run) == ["Is vegan"]
    assert {call.status for call in _embedding_calls(run)} == {"failed"}


def test_without_an_embedding_model_not_one_statement_more(owner):
    snapshot = {"agent": {"id": 1}, "memory": {"space": "", "kinds": KINDS, "shown": 5, "ttl_days": None}}
    workspace_id = default_workspace_id()
    with CaptureQueriesContext(connection) as looked_up:
        assert memory_embedding_model(snapshot) is None
        assert memory_embedding_model({"agent": {"id": 1}}) is None
    with CaptureQueriesContext(connection) as applied:
        memory_apply(
            workspace_id=workspace_id,
            scope=SCOPE,
            owner_id=owner.pk,
            end_user="u1",
            proposals=[MemoryProposal("add", "fact", "住在成都"), MemoryProposal("add", "fact", "喜欢猫")],
            source="extraction",
            kinds=KINDS,
            ttl_days=None,
        )
    with CaptureQueriesContext(connection) as searched:
        _search(owner, query="成都天气", workspace_id=workspace_id)

    # What memory_apply and memory_search took before vectors existed: savepoint, lock, held rows,
    # two inserts, the change rows, release; and one select.
    assert (len(looked_up), len(applied), len(searched)) == (0, 7, 1)
    assert not LLMCall.objects.exists()


def test_the_version_pins_the_embedding_model_and_a_run_searches_with_it(owner, embedder, fake_llm):
    agent = make_agent(memory_enabled=True)
    without = agent_version_current(agent=agent)
    assert "embedding_model" not in without.snapshot["memory"]

    agent.memory_embedding_model = embedder
    agent.save()
    pinned = agent_version_current(agent=agent)
    assert pinned.number == without.number + 1
    assert set(pinned.snapshot["memory"]) == MemorySnapshot.__required_keys__ | {"embedding_model"}
    model = pinned.snapshot["memory"]["embedding_model"]
    assert set(model) == set(ModelSnapshot.__required_keys__) and "api_key" not in model
    assert (model["id"], model["base_url"], model["model"]) == (embedder.pk, fake_llm.api_base, "fake-embedding")
    # Editing the config itself (not the agent) pins a new version too, also where the version
    # was found by the agent's configuration state.
    agent.refresh_from_db()
    assert agent_version_current(agent=agent) == pinned
    ModelConfig.objects.filter(pk=embedder.pk).update(read_timeout_seconds=7)
    agent.refresh_from_db()  # as the next request reads it
    assert agent_version_current(agent=agent).snapshot["memory"]["embedding_model"]["read_timeout_seconds"] == 7.0

    # A run searches with the model as its version pinned it, the key from the row.
    snapshot = snapshot_build(agent=agent)
    ModelConfig.objects.filter(pk=embedder.pk).update(model="renamed", api_key="secret")
    config = memory_embedding_model(snapshot)
    assert (config.pk, config.model, config.api_key) == (embedder.pk, "fake-embedding", "secret")

    run = ledger_run(agent)
    Conversation.objects.filter(pk=run.conversation_id).update(owner=owner, end_user="u1")
    scope = f"agent:{agent.pk}"
    for statement in STATEMENTS:
        memory_apply(
            workspace_id=default_workspace_id(),
            scope=scope,
            owner_id=owner.pk,
            end_user="u1",
            proposals=[MemoryProposal("add", "fact", statement)],
            source="api",
            kinds=KINDS,
            ttl_days=None,
        )
    question = Message.objects.create(conversation=run.conversation, run=run, order=1, role="user", content=QUERY)

    recall = memories_recall(run=run, snapshot=version_snapshot(run.agent_version_id), messages=[question], iteration=1)

    assert recall.memories[0].statement == "Is vegan"
    [call] = _embedding_calls(run)
    assert call.request["input"][0] == QUERY and call.status == "succeeded"


def test_the_agent_admin_sets_the_memory_embedding_model_under_memory_with_change_agent(client, embedder):
    agent = make_agent()
    operator = make_user(staff=True)
    client.force_login(operator)
    url = reverse("admin:agents_agent_change", args=[agent.pk])
    assert client.get(url).status_code == 403

    operator.user_permissions.add(Permission.objects.get(codename="view_agent"))
    assert client.post(url, _form(agent, memory_embedding_model=embedder.pk)).status_code == 403
    operator.user_permissions.add(Permission.objects.get(codename="change_agent"))
    page = client.get(url).content.decode()
    assert 'name="memory_embedding_model"' in page[page.index(">Memory</h2>") :]

    response = client.post(url, _form(agent, memory_enabled="on", memory_embedding_model=embedder.pk))

    assert response.status_code == 302, response.content.decode()[:3000]
    agent.refresh_from_db()
    assert agent.memory_embedding_model == embedder
    assert agent_version_current(agent=agent).snapshot["memory"]["embedding_model"]["id"] == embedder.pk
    response = client.post(url, _form(agent, memory_embedding_model=999999))
    assert response.status_code == 200 and "memory_embedding_model" in response.context["adminform"].form.errors


@pytest.mark.django_db(transaction=True)
def test_a_run_s_extraction_stores_its_memories_with_vectors_and_the_next_run_finds_them(
    scripted_agent, embedder, extractions
):
    extraction = {"changes": [{"action": "add", "kind": "fact", "statement": "Is vegan"}]}
    script = {
        "scenarios": [{"match": ".", "steps": [{"content": "Noted."}]}],
        "memory_extraction": {"content": json.dumps(extraction)},
    }
    agent = scripted_agent(script, memory_enabled=True, memory_embedding_model=embedder)
    owner = make_user()
    first = advance(start_run(agent, "I am vegan", conversation_create(agent=agent, owner=owner, end_user="u1")))
    assert _embedding_calls(first) == []  # nothing held yet: nothing to search

    memory_extract(run_id=first.pk)

    [call] = _embedding_calls(first)
    assert call.request["input"] == ["Is vegan"] and call.status == "succeeded"
    assert Memory.objects.get().embedding["model"] == f"{embedder.pk}:fake-embedding"

    second = advance(start_run(agent, QUERY, conversation_create(agent=agent, owner=owner, end_user="u1")))
    [searched] = _embedding_calls(second)
    assert searched.request["input"] == [QUERY]
    # Both runs' totals are the sum of their calls, their embeddings included.
    assert_totals_match_calls(first)
    assert_totals_match_calls(second)
    assert MemoryUse.objects.get(run=second).memory.statement == "Is vegan"
