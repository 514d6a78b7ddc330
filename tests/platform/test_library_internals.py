"""Tripwires for the library internals the kept mechanisms reach into (docs/benchmark.md lists
them): each test fails when one of them changes shape, before the mechanism silently stops
working or breaks a worker.

- the worker's event loop (engine/reactor.py, platform_site/green.py, green_db.py,
  green_http.py) replaces `psycopg.waiting.wait` and wraps `django.db.connections._connections`,
  hands the loop back with `asyncio._set_running_loop`, raises `psycopg.errors._WaitTimeout`,
  reads `httpx.Client._transport` and aiohttp's `StreamReader.total_bytes`, and hooks Django's
  PostgreSQL backend at `_configure_connection` and `_close`;
- psycopg's statement-parse cache limits (`psycopg._queries`; tests/platform/test_statement_cache.py
  checks that the raised limits are used);
- the orjson dumpers subclass `psycopg.types.json._JsonDumper` (tests/platform/test_jsonb_dumpers.py
  checks what they store).

The libraries are pinned (requirements.txt). An upgrade fails the first test here until these
internals are checked again against the new version and WRITTEN_FOR is moved with the pin.
"""

import asyncio
import inspect
import json
import re
from importlib.metadata import version
from pathlib import Path

import aiohttp
import httpx
import psycopg
import psycopg.waiting
import pytest
import uvloop
from asgiref.local import Local
from django.conf import settings
from django.db import connection, connections
from django.db.backends.postgresql import base as django_postgresql
from django.db.utils import ConnectionHandler
from psycopg import _queries as psycopg_queries
from psycopg.types.json import Jsonb, JsonbBinaryDumper, JsonbDumper, _JsonDumper

from platform_site import green, green_db, green_http
from platform_site.postgresql import base as our_backend
from platform_site.postgresql.jsonb import OrjsonJsonbBinaryDumper, OrjsonJsonbDumper, _Orjson

# The versions whose internals the mechanisms and these tests were written against.
WRITTEN_FOR = {
    "Django": "5.2.19",
    "asgiref": "3.13.0",
    "psycopg": "3.3.9",
    "greenlet": "3.5.6",
    "httpx": "0.28.1",
    "aiohttp": "3.14.5",
    "uvloop": "0.23.0",
}


def _pinned() -> dict[str, str]:
    pins = {}
    for line in (Path(settings.BASE_DIR) / "requirements.txt").read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s;#]+)", line)
        if found:
            pins[found.group(1).lower()] = found.group(2)
    return pins


@pytest.mark.parametrize("name", sorted(WRITTEN_FOR))
def test_the_libraries_are_the_versions_these_internals_were_checked_on(name):
    assert _pinned().get(name.lower()) == WRITTEN_FOR[name], f"{name}'s pin moved: check its internals below"
    assert version(name) == WRITTEN_FOR[name]


# --- psycopg.waiting.wait, replaced by green_db.carried_wait -----------------------------------


def test_psycopg_s_wait_takes_what_the_carried_wait_takes():
    # green_db keeps psycopg's own wait (captured when it was imported, before any install) for
    # code that is not carried, and calls it with these arguments.
    assert green_db._plain_wait.__name__.startswith("wait")
    ours = list(inspect.signature(green_db.carried_wait).parameters)
    theirs = list(inspect.signature(green_db._plain_wait).parameters)
    assert ours == theirs == ["gen", "fileno", "interval", "timeout"]
    assert list(inspect.signature(psycopg.Connection.wait).parameters) == ["self", "gen", "interval", "timeout"]


def test_psycopg_s_wait_states_are_the_ones_the_carried_wait_compares():
    assert psycopg.waiting.WAIT_R is psycopg.waiting.Wait.R and psycopg.waiting.WAIT_W is psycopg.waiting.Wait.W
    assert psycopg.waiting.READY_R is psycopg.waiting.Ready.R and psycopg.waiting.READY_W is psycopg.waiting.Ready.W
    # Raised by the carried wait on a timeout, as psycopg's own waits raise it and its
    # Connection.wait catches it.
    assert issubclass(psycopg.errors._WaitTimeout, psycopg.OperationalError)


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="psycopg's wait")
def test_a_statement_waits_through_psycopg_waiting_wait_looked_up_at_each_call(monkeypatch):
    # green_db.install() replaces the module's attribute: psycopg must read it at each wait (not
    # have bound the function at import) for the replacement to take effect.
    calls = []
    current = psycopg.waiting.wait

    def spy(gen, fileno, interval=0.0, timeout=None):
        calls.append(fileno)
        return current(gen, fileno, interval=interval, timeout=timeout)

    monkeypatch.setattr(psycopg.waiting, "wait", spy)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    assert calls and set(calls) == {connection.connection.pgconn.socket}


# --- django.db.connections._connections, wrapped by green_db._CarriedLocal ----------------------


def test_django_keeps_each_thread_s_connections_in_a_local_named_connections():
    # Thread-critical for databases: asgiref's thread-local kind of Local.
    assert ConnectionHandler.thread_critical is True
    handler = ConnectionHandler(settings.DATABASES)
    assert type(handler._connections) is type(Local(thread_critical=True))
    # The process's handler holds one too, wrapped once the worker's loop is installed.
    held = connections._connections
    held = held._fallback if isinstance(held, green_db._CarriedLocal) else held
    assert type(held) is type(handler._connections)


def test_django_reaches_its_connections_only_through_the_local_s_attributes():
    """Wrapped as green_db.install() wraps it, a handler gives carried code wrappers of its own
    and leaves everyone else's where they were: which holds only while Django gets, sets,
    deletes and tests connections as attributes of `_connections`."""
    handler = ConnectionHandler(settings.DATABASES)
    handler._connections = green_db._CarriedLocal(handler._connections)
    plain = handler["default"]
    assert handler["default"] is plain and handler.all(initialized_only=True) == [plain]

    def carried_code():
        assert handler.all(initialized_only=True) == []
        own = handler["default"]
        assert own is not plain and handler["default"] is own
        del handler["default"]
        assert handler.all(initialized_only=True) == []
        handler["default"] = own
        return own

    own = asyncio.run(green.spawn(carried_code))
    assert own is not plain
    assert handler["default"] is plain and handler.all(initialized_only=True) == [plain]
    del handler["default"]
    assert handler.all(initialized_only=True) == []


def test_django_s_postgresql_backend_has_the_hooks_ours_overrides():
    # _configure_connection: each new connection gets the dumpers; _close: a carried run's pool
    # slot is given back (platform_site.postgresql.base).
    for name, parameters in (("_configure_connection", ["self", "connection"]), ("_close", ["self"])):
        hook = getattr(django_postgresql.DatabaseWrapper, name)
        assert list(inspect.signature(hook).parameters) == parameters
        assert name in our_backend.DatabaseWrapper.__dict__
    # Called for a new connection, pooled (the pool's configure) or not (init_connection_state).
    assert "configure=self._configure_connection" in inspect.getsource(django_postgresql.DatabaseWrapper.pool.fget)
    assert "self._configure_connection(" in inspect.getsource(django_postgresql.DatabaseWrapper.init_connection_state)
    assert "self._close()" in inspect.getsource(django_postgresql.DatabaseWrapper.close)


# --- asyncio._set_running_loop, with which green.spawn runs plain code on the loop's thread ------


@pytest.mark.parametrize("new_loop", [uvloop.new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"])
def test_unsetting_the_running_loop_makes_code_plain_until_it_is_set_again(new_loop):
    async def check():
        loop = asyncio.get_running_loop()
        asyncio._set_running_loop(None)
        try:
            with pytest.raises(RuntimeError):
                asyncio.get_running_loop()  # what Django's async_unsafe asks
        finally:
            asyncio._set_running_loop(loop)
        return asyncio.get_running_loop() is loop

    loop = new_loop()
    try:
        assert loop.run_until_complete(check())
    finally:
        loop.close()


# --- httpx and aiohttp, under green_http ---------------------------------------------------------


def test_an_httpx_client_keeps_its_transport_where_green_http_reads_it():
    transport = green_http.CarriedTransport()
    assert httpx.Client(transport=transport)._transport is transport
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(green_http.carried_client(loop)._transport, green_http.CarriedTransport)
    finally:
        green_http._clients.pop(loop, None)
        loop.close()


def test_aiohttp_s_stream_counts_the_bytes_it_received():
    # Read when a whole body is cut short (received_bytes on the error, green_http.handle_whole).
    assert "total_bytes" in inspect.getsource(aiohttp.StreamReader.__init__)
    assert issubclass(aiohttp.ConnectionTimeoutError, TimeoutError)  # checked before TimeoutError


# --- psycopg._queries and psycopg.types.json._JsonDumper ------------------------------------------


def test_psycopg_s_statement_cache_limits_are_where_the_backend_raises_them():
    assert psycopg_queries.MAX_CACHED_STATEMENT_PARAMS >= our_backend.STATEMENT_CACHE_PARAMS
    assert psycopg_queries.MAX_CACHED_STATEMENT_LENGTH >= our_backend.STATEMENT_CACHE_LENGTH
    # Read as module globals at each call (server-side and client-side binding), where the raised
    # values take effect.
    for query in (psycopg_queries.PostgresQuery, psycopg_queries.PostgresClientQuery):
        source = inspect.getsource(query.convert)
        assert "MAX_CACHED_STATEMENT_LENGTH" in source and "MAX_CACHED_STATEMENT_PARAMS" in source
    assert hasattr(psycopg_queries._query2pg, "cache_info")  # what test_statement_cache reads


def test_psycopg_s_jsonb_dumpers_still_dump_through_json_dumper():
    assert JsonbDumper.__bases__ == (_JsonDumper,) and JsonbBinaryDumper.__bases__ == (_JsonDumper,)
    assert list(inspect.signature(_JsonDumper.__init__).parameters) == ["self", "cls", "context"]
    # Ours sit between psycopg's Jsonb dumpers and _JsonDumper: the binary one still adds its
    # version byte around what _Orjson.dump returns.
    for ours, theirs in ((OrjsonJsonbDumper, JsonbDumper), (OrjsonJsonbBinaryDumper, JsonbBinaryDumper)):
        mro = ours.__mro__
        assert mro.index(theirs) < mro.index(_Orjson) < mro.index(_JsonDumper)
    # What Django sends (Jsonb with json.dumps) goes orjson's way: no spaces.
    value = Jsonb({"a": 1}, dumps=json.dumps)
    assert bytes(OrjsonJsonbDumper(Jsonb).dump(value)) == b'{"a":1}'
    assert bytes(OrjsonJsonbBinaryDumper(Jsonb).dump(value)) == b'\x01{"a":1}'
