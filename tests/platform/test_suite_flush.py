"""The suite's cleanup after a test that commits (tests/support/flush.py): every row the test wrote is
deleted, in any order of foreign keys, and what post_migrate makes (content types, permissions,
the approvers' and operators' groups) is there again for the next test; content types and
permissions, which post_migrate would make again row for row, are kept as they were."""

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.models import Run
from conversations.permissions import APPROVERS_GROUP, OPERATORS_GROUP
from tests.support.factories import make_agent
from tests.support.runs import start_run

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite's flush deletes already"),
]

# Rows post_migrate writes again after every flush.
REMADE = {ContentType, Permission, Group, Group.permissions.through}


def _flush():
    """What Django's TransactionTestCase runs after each test."""
    call_command("flush", verbosity=0, interactive=False, reset_sequences=False, allow_cascade=False)


def test_a_flush_deletes_every_row_and_post_migrate_remakes_the_groups():
    run = start_run(make_agent(), "hello")
    assert Run.objects.filter(pk=run.pk).exists()

    with CaptureQueriesContext(connection) as queries:
        _flush()

    flushed = [query["sql"] for query in queries if "DELETE FROM" in query["sql"]]
    assert len(flushed) == 1 and not any("TRUNCATE" in query["sql"] for query in queries)
    left = {
        model._meta.label: model.objects.count()
        for model in apps.get_models(include_auto_created=True)
        if model not in REMADE and model._meta.managed and not model._meta.proxy
    }
    assert {label: count for label, count in left.items() if count} == {}
    for name in (APPROVERS_GROUP, OPERATORS_GROUP):
        assert Group.objects.get(name=name).permissions.exists()


def test_a_flush_keeps_content_types_and_permissions_as_post_migrate_makes_them():
    kept = set(Permission.objects.values_list("pk", "content_type__app_label", "codename"))
    with CaptureQueriesContext(connection) as queries:
        _flush()
    assert set(Permission.objects.values_list("pk", "content_type__app_label", "codename")) == kept
    assert not [query["sql"] for query in queries if "INSERT" in query["sql"] and "auth_permission" in query["sql"]]
    # Exactly what post_migrate makes: a flush that deletes them makes the same set again.
    call_command("flush", verbosity=0, interactive=False, reset_sequences=True, allow_cascade=False)
    assert {row[1:] for row in Permission.objects.values_list("pk", "content_type__app_label", "codename")} == {
        row[1:] for row in kept
    }


def test_a_flush_asked_to_reset_sequences_still_truncates():
    with CaptureQueriesContext(connection) as queries:
        call_command("flush", verbosity=0, interactive=False, reset_sequences=True, allow_cascade=False)
    assert any("TRUNCATE" in query["sql"] for query in queries)
