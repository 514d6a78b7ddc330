"""Django's PostgreSQL backend, with waits that carried code makes cooperatively.

A worker's engine loop carries hundreds of runs in one thread (platform_site.green). Their
statements wait on PostgreSQL like their model calls wait on HTTP: the loop runs other runs
meanwhile (platform_site.green_db). Each carried run borrows a pooled connection only between
two waits on the network; taking one waits cooperatively for a free slot, since a thread
blocked in the pool would stop the very runs that are about to give connections back.

A new connection also knows how to send the models' choices (a run's status, a message's role)
without searching for it: see choices_dumpers_register; and encodes JSON values with orjson where
that stores the same value (platform_site.postgresql.jsonb).

psycopg turns a statement's %s placeholders into PostgreSQL's $1, $2 … by parsing its text, and
keeps the result for the next execution only for statements of at most 50 parameters and 4096
characters (ORMs make endless shapes of longer ones). The ledger's batches are a few fixed shapes
each a step makes again and again, and an answer's batch with its tool calls' rows has 66
parameters: it was parsed anew on every execution, two of a run's thirteen statements, 0.14 ms of
CPU each (measured on this statement; a cached lookup is 0.1 µs). The limits are raised; the
cache still keeps at most 128 statements, the least recently used going first.
"""

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.postgresql import base
from django.db.models.enums import Choices
from psycopg import _queries as psycopg_queries
from psycopg.adapt import AdaptersMap, PyFormat

from platform_site.green_db import connection_slot_release, connection_slot_take
from platform_site.postgresql.jsonb import jsonb_dumpers_register

STATEMENT_CACHE_PARAMS = 256
STATEMENT_CACHE_LENGTH = 16384
# A private surface of psycopg, written for 3.3.9 (requirements.txt pins it): if an upgrade renames
# the limits, setting them would change nothing, silently. Refuse to start instead
# (tests/platform/test_statement_cache.py checks that the cache is used).
if not all(hasattr(psycopg_queries, name) for name in ("MAX_CACHED_STATEMENT_PARAMS", "MAX_CACHED_STATEMENT_LENGTH")):
    raise ImproperlyConfigured("psycopg's statement cache limits moved: review platform_site.postgresql.base")
psycopg_queries.MAX_CACHED_STATEMENT_PARAMS = max(psycopg_queries.MAX_CACHED_STATEMENT_PARAMS, STATEMENT_CACHE_PARAMS)
psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = max(psycopg_queries.MAX_CACHED_STATEMENT_LENGTH, STATEMENT_CACHE_LENGTH)


def _subclasses(cls: type):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def choices_dumpers_register(adapters: AdaptersMap) -> None:
    """Send each choices class (TextChoices, IntegerChoices) as its plain type is sent.

    psycopg finds the dumper of a value's exact class in a dictionary, and of a subclass by
    walking its bases, raising and catching a KeyError and formatting a name at each, on every
    new cursor: the five statuses and roles of a step's batch took about 60 % of the time its
    47 parameters took to dump (0.075 of 0.128 ms, measured on a fresh cursor). Registered here,
    they are found at once, and sent exactly as before (the dumper psycopg found for str or int).
    """
    for cls in _subclasses(Choices):
        plain = next((base for base in (str, int) if issubclass(cls, base)), None)
        if plain is None or not cls.__members__:
            continue
        auto = adapters.get_dumper(plain, PyFormat.AUTO)
        for format_ in (PyFormat.TEXT, PyFormat.BINARY):
            dumper = adapters.get_dumper(plain, format_)
            if dumper is not auto:
                adapters.register_dumper(cls, dumper)
        adapters.register_dumper(cls, auto)  # last: registering also sets the AUTO format's


class DatabaseWrapper(base.DatabaseWrapper):
    _slot = None

    def _configure_connection(self, connection):
        # Once per new connection, pooled or not (Django calls it from the pool's configure too).
        choices_dumpers_register(connection.adapters)
        jsonb_dumpers_register(connection.adapters)
        return super()._configure_connection(connection)

    def get_new_connection(self, conn_params):
        slot = connection_slot_take(self.settings_dict) if self.pool else None
        try:
            connection = super().get_new_connection(conn_params)
        except BaseException:
            connection_slot_release(slot)
            raise
        self._slot = slot
        return connection

    def _close(self):
        try:
            return super()._close()
        finally:
            slot, self._slot = self._slot, None
            connection_slot_release(slot)
