"""A statement read at once gets a cursor kept with its connection on PostgreSQL
(platform_site.cursors.statement_cursor, DatabaseWrapper.kept_cursor), Django's own elsewhere."""

import sqlite3

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from platform_site.cursors import statement_cursor

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="the kept cursor is PostgreSQL's")


def _read(sql="SELECT %s + 1, %s", params=(41, "成都")):
    with statement_cursor() as cursor:
        cursor.execute(sql, list(params))
        return cursor.fetchall(), cursor


@pytest.mark.django_db
def test_rows_are_those_a_plain_cursor_reads():
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s + 1, %s", [41, "成都"])
        expected = cursor.fetchall()
    assert _read()[0] == expected == [(42, "成都")]


@postgresql_only
@pytest.mark.django_db
def test_on_postgresql_one_psycopg_cursor_is_kept_each_use_wrapped_anew():
    _, first = _read()
    _, second = _read()
    assert first is not second  # a fresh Django wrapper each time: hooks and error wrapping apply
    assert first.cursor is second.cursor is connection.connection._agentry_kept_cursor
    assert not second.cursor.closed


def _closed(raw) -> bool:
    if hasattr(raw, "closed"):  # psycopg's
        return raw.closed
    try:  # sqlite3's refuses any use once closed
        raw.fetchall()
    except sqlite3.ProgrammingError:
        return True
    return False


@pytest.mark.django_db
def test_where_it_is_not_kept_it_is_closed_after_use():
    if connection.vendor == "postgresql":
        # While queries are logged, every statement goes through Django's own debug cursor.
        with CaptureQueriesContext(connection):
            _, cursor = _read()
    else:
        _, cursor = _read()
    assert _closed(cursor.cursor)


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_it_follows_its_connection_across_a_close_and_a_reconnect():
    _read()
    connection.close()
    rows, after = _read()
    assert rows == [(42, "成都")]
    assert after.cursor is connection.connection._agentry_kept_cursor
    assert after.cursor.connection is connection.connection


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_failed_statement_leaves_it_usable():
    _read()
    with pytest.raises(DatabaseError):
        _read("SELECT no_such_column FROM (SELECT 1) AS t", ())
    assert _read()[0] == [(42, "成都")]
    with pytest.raises(DatabaseError), transaction.atomic():
        _read("SELECT 1 / %s", (0,))
    assert _read()[0] == [(42, "成都")]


@pytest.mark.django_db
def test_captured_queries_and_execute_wrappers_see_every_statement():
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with CaptureQueriesContext(connection) as captured:
        _read()
        _read("SELECT %s", (1,))
    assert len(captured.captured_queries) == 2
    with connection.execute_wrapper(wrapper):
        _read()
        _read("SELECT %s", (1,))
    assert seen == ["SELECT %s + 1, %s", "SELECT %s"]
