"""How a transactional test's tables are emptied after it, on PostgreSQL: DELETE, not TRUNCATE.

Django empties every table after a test that commits (pytest-django's `transaction=True`,
`transactional_db`, and so every end-to-end test) with one TRUNCATE of all of them. PostgreSQL
truncates a table by giving it, and each of its indexes, a new file: for the suite's 53 tables
that is about 0.35 s a test on a loaded 2-core machine, where deleting the few rows a test wrote
takes milliseconds. The rows go all the same, in one transaction, and Django's flush still emits
post_migrate afterwards (content types, permissions and the default groups come back as before).

Every foreign key Django makes is DEFERRABLE INITIALLY DEFERRED, so the order of the DELETEs does
not matter: the constraints are checked at the commit, when every table is empty. Sequences are
not reset either way (Django's test teardown asks for no reset). With a reset or a cascade asked
for, Django's own TRUNCATE runs.

Content types and permissions are kept: post_migrate makes exactly those rows again (no test
writes either), and making them was most of a flush's cost (about 130 ms of 150 on a loaded
2-core machine, two hundred permission rows inserted after every committing test). Everything
that refers to them (group and user permissions, admin log entries) is deleted as before, and the
default groups are made again by post_migrate with their permissions.
"""

from django.db.backends.postgresql.operations import DatabaseOperations

_truncate = DatabaseOperations.sql_flush
# What post_migrate would make again, row for row: kept (see above).
KEPT = frozenset({"django_content_type", "auth_permission"})


def _sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
    if reset_sequences or allow_cascade or not tables:
        return _truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
    statements = ["SET CONSTRAINTS ALL DEFERRED"]
    statements += [
        f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))}"
        for table in tables
        if table not in KEPT
    ]
    # One string, so one round trip; flush runs it in a transaction of its own.
    return ["; ".join(statements)]


def install() -> None:
    """For the test process only: the web servers and workers it starts never empty tables."""
    DatabaseOperations.sql_flush = _sql_flush
