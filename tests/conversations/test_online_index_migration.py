"""Migration 0019 adds the runs' creation indexes to an existing database without blocking its
writes (CREATE INDEX CONCURRENTLY on PostgreSQL): back to 0018 and forward again over a ledger
that holds runs, and the indexes are there, valid, and read by a page of the runs list."""

import pytest
from django.core.management import call_command
from django.db import connection

from agents.services import agent_version_current
from conversations.models import Run
from conversations.services import conversation_create
from tests.support.factories import make_agent

INDEXES = ("run_created_idx", "run_agent_created_idx")


def _indexes() -> dict[str, bool]:
    """The runs' creation indexes the database holds, and whether each is valid."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = ANY(%s)",
                [list(INDEXES)],
            )
            return dict(cursor.fetchall())
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        return {name: True for (name,) in cursor.fetchall() if name in INDEXES}


@pytest.mark.django_db(transaction=True)
def test_the_creation_indexes_are_built_on_a_database_holding_runs():
    agent = make_agent(slug="migrated")
    conversation = conversation_create(agent=agent)
    Run.objects.bulk_create(
        Run(
            conversation=conversation, agent=agent, agent_version=agent_version_current(agent=agent), status="completed"
        )
        for _ in range(200)
    )
    call_command("migrate", "conversations", "0018", verbosity=0)
    assert _indexes() == {}
    try:
        call_command("migrate", "conversations", "0019", verbosity=0)
    finally:
        call_command("migrate", verbosity=0)
    assert _indexes() == dict.fromkeys(INDEXES, True)
    assert Run.objects.filter(agent=agent).order_by("-created_at").count() == 200
