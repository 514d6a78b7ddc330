"""A cursor for statements whose rows are read at once, kept with its connection on PostgreSQL.

Django makes a new psycopg cursor for every `connection.cursor()`, and psycopg builds each new
cursor's adapters (its dumpers' and loaders' caches) again: on a worker carrying runs, making and
closing cursors was about 6 % of its CPU, the ledger's batches most of it (a profile of the
throughput figure). `statement_cursor()` hands out Django's cursor wrapper around one psycopg
cursor that stays with the pooled psycopg connection (DatabaseWrapper.kept_cursor), so the
wrapper's execute hooks, its error wrapping and the broken-transaction check still apply.

The rows of a statement must be read before the next statement on the same connection: the
cursor is shared, and a second execute replaces its results. Every caller executes one statement
and fetches at once. Elsewhere (SQLite, or while queries are logged: DEBUG, or a test's
CaptureQueriesContext, which must see every statement) it is Django's own cursor, closed after use.
"""

from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections


@contextmanager
def statement_cursor():
    wrapper = connections[DEFAULT_DB_ALIAS]
    kept = getattr(wrapper, "kept_cursor", None)
    if kept is None or wrapper.queries_logged:
        with wrapper.cursor() as cursor:
            yield cursor
    else:
        yield kept()
