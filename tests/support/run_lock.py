"""One test run at a time on a test database and a Redis db.

Two runs on the same test database and Redis db (the suite's defaults, when neither was given
TEST_DATABASE_URL and TEST_REDIS_URL) break each other slowly: one drops or empties the other's
tables, flushes its broker, kills its worker. So a run takes a PostgreSQL advisory lock on each,
once it has collected tests that use the database (the unit tier uses neither), and a second run
on either is refused at once, naming the first. Runs on databases and Redis dbs of their own run
side by side. The lock belongs to a connection of the pytest process, so it goes with that
process however it ends; the workers and servers the suite starts take none.
"""

import hashlib
import os
import time

import psycopg
import pytest
from django.conf import settings
from django.db import connections

# Who holds a lock shows as the connection's application name (at most 63 characters).
HOLDER_PREFIX = "agentry tests"

HOLDER_SQL = """
    SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND ((l.classid::bigint << 32) | l.objid::bigint) = %s
"""


def _key(resource: str) -> int:
    # A non-negative 63-bit key, so that pg_locks' two halves read back as the same number.
    return int.from_bytes(hashlib.sha256(resource.encode()).digest()[:8], "big") >> 1


def _shared() -> list[str]:
    """What another run on the same settings would share with this one: the test database (the
    one DATABASE_URL or TEST_DATABASE_URL names, with pytest-django's prefix) and the Redis db."""
    database = settings.DATABASES["default"]
    test_name = (database.get("TEST") or {}).get("NAME") or f"test_{database['NAME']}"
    return [f"database {test_name}", f"Redis {os.environ.get('REDIS_URL', '')}"]


def _uses_database(item) -> bool:
    # The mark asks for the database when the test runs; a fixture that needs it is in the closure.
    return item.get_closest_marker("django_db") is not None or "django_db_setup" in item.fixturenames


class RunLock:
    """Registered by tests/conftest.py."""

    def __init__(self):
        self.connection = None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        if connections["default"].vendor != "postgresql":
            return
        database = settings.DATABASES["default"]
        if not any(_uses_database(item) for item in session.items):
            return
        holder = f"{HOLDER_PREFIX} pid {os.getpid()} started {time.strftime('%Y-%m-%d %H:%M:%S')}"
        try:
            connection = psycopg.connect(
                host=database["HOST"] or "127.0.0.1",
                port=database["PORT"] or 5432,
                user=database["USER"],
                password=database["PASSWORD"] or None,
                dbname="postgres",
                application_name=holder,
                autocommit=True,
                connect_timeout=5,
            )
        except psycopg.OperationalError:
            return  # no server: the run fails on its own, with the server's error
        for resource in _shared():
            key = _key(resource)
            if not connection.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0]:
                row = connection.execute(HOLDER_SQL, [key]).fetchone()
                connection.close()
                other = row[0].removeprefix(HOLDER_PREFIX).strip() if row else "unknown"
                raise pytest.UsageError(
                    f"another test run ({other}) is using {resource}; set TEST_DATABASE_URL and "
                    "TEST_REDIS_URL (a database and a Redis db of this run's own) to run beside it"
                )
        self.connection = connection

    def pytest_unconfigure(self, config):
        if self.connection is not None:
            self.connection.close()
            self.connection = None
