"""Knowledge rows in the ledger's lifecycle: a run's searches go with it when it is purged;
indexing embeddings (no run) stay out of the per-agent monitoring rollups."""

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.models import LLMCall
from conversations.monitoring.models import LLMCallHourly
from conversations.monitoring.rollups import rollups_refresh
from conversations.retention import runs_purge
from knowledge.models import KnowledgeSearch
from tests.knowledge.helpers import add_documents, make_base
from tests.support.factories import make_agent
from tests.support.ledger_seed import ledger_seed

pytestmark = pytest.mark.django_db


def test_purging_a_run_deletes_its_searches():
    base = make_base()
    agent = make_agent(slug="kb-retention", retention_days=30)
    (old,) = ledger_seed(agent, 1, created_at=timezone.now() - timedelta(days=40))
    KnowledgeSearch.objects.create(base=base, run=old, tool_call_id="call-1", query="q", top_k=3)

    runs_purge(agent=agent)

    assert not KnowledgeSearch.objects.exists()


def test_indexing_embeddings_are_not_rolled_up_per_agent(fake_llm):
    add_documents(make_base(embeddings_at=fake_llm.api_base), "en-refund.md")
    assert LLMCall.objects.filter(run__isnull=True, purpose="embedding").count() == 1
    rollups_refresh()
    assert not LLMCallHourly.objects.exists()
