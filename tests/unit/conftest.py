"""The unit tier: tests that need no database, no Redis, no server and no other process, so the
tier runs in seconds while one edits (`scripts/test.sh tests/unit`).

A test here that reaches for any of them fails at once, saying what it reached for, instead of
quietly slowing the tier down or passing only where PostgreSQL and Redis happen to run.
pytest-django already refuses database access to a test without the `django_db` mark; the mark
itself (or a database fixture) is refused here, and so are socket connections (Redis, HTTP, the
fake model server), servers (a bound socket) and child processes. A test that needs one belongs
in the database tier (the folders beside this one) or, if it starts a worker, browser or web
server process, in the e2e tier.
"""

import socket
import subprocess

import pytest

# Fixtures that hand a test the database (pytest-django's, and the suite's that build on them).
DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_setup",
        "live_server",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
    }
)


class UnitTierViolation(AssertionError):
    """What a unit test reached for that the tier does not allow."""


def _refuse(what: str):
    def refused(*args, **kwargs):
        raise UnitTierViolation(f"unit tests open no {what}: move this test to the database or e2e tier")

    return refused


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture is set up, so a database test moved here by mistake fails without the
    test database being created."""
    asked = sorted(DATABASE_FIXTURES.intersection(item.fixturenames))
    if item.get_closest_marker("django_db") or asked:
        reason = f"fixture {asked[0]}" if asked else "the django_db mark"
        raise UnitTierViolation(f"unit tests use no database ({reason}): move this test to the database tier")


@pytest.fixture(autouse=True)
def _no_sockets_or_processes(monkeypatch):
    monkeypatch.setattr(socket.socket, "connect", _refuse("socket connection"))
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse("socket connection"))
    monkeypatch.setattr(socket.socket, "bind", _refuse("listening socket"))
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("child process"))
