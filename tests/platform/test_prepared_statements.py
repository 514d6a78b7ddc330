"""PostgreSQL plans a statement that a connection sends again only once (AGENTRY_DB_PREPARE):
parameters travel apart from the statement, and its second execution prepares it."""

import uuid

import pytest
from django.db import connection

from conversations.models import Run

pytestmark = pytest.mark.django_db


def _prepared_on_this_connection() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall() if '"conversations_run"' in statement]


def test_a_statement_sent_twice_with_other_values_is_prepared_once_with_placeholders():
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    Run.objects.filter(pk=uuid.uuid4()).exists()
    assert _prepared_on_this_connection() == []  # once is not worth preparing
    # The same query with another value is the same statement: its value is a parameter.
    Run.objects.filter(pk=uuid.uuid4()).exists()
    prepared = _prepared_on_this_connection()
    assert len(prepared) == 1
    assert "$1" in prepared[0]
