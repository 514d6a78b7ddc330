"""Ledger writes that commit together, in one round trip where the database allows it.

What a step records (a model call completed, the run's totals, the assistant message, the
event) commits together and only while the worker holds the run's lease. A Batch lists those
writes in order; the first is the guard (typically the run's UPDATE that checks the lease and
bumps the event sequence), and every other write takes effect only if the guard matched a row.

On PostgreSQL a batch is one statement: the writes become data-modifying WITH queries, and one
statement in autocommit is its own transaction, so a step pays no BEGIN and COMMIT round trips
(inside the caller's transaction it simply joins it). SQLite has no data-modifying WITH: there
the same statements run one by one in a transaction, the guard first, stopping if it matched
nothing.

In a write's SQL `{guard}` stands for "the guard matched a row", and `{name.column}` for a
column of the row an earlier write returned (its `returning`; `guard.column` for the guard's),
e.g. the message order a counter bump handed out; between SQLite's statements only integers
are carried. `{events}` stands for the number of the batch's event writes (added with `event`):
a guard that bumps the run's event sequence by it numbers several events in one batch. A write
whose columns are read returns at most one row. Every WITH query sees the database as it was
when the statement began, so a write sees what earlier writes did only through such
references. A batch may also read a row (`read`), in the same round trip.

A batch that is its own transaction may commit asynchronously (`asynchronous_commit`): PostgreSQL
answers the COMMIT before its WAL reaches the disk, and flushes it within a fraction of a second,
or at once with the next synchronous commit of any session (the WAL is one ordered log, so that
commit's flush carries every earlier one). Only for a commit that nothing outside the database
waits on: the engine commits synchronously before each effect outside it (a model request, a
side-effecting tool, a run's end that clients and webhooks hear of), so each such effect still
follows its own records on disk. A database crash can then undo the asynchronous commits of the
last moments, and only those that no effect has followed yet: the run is found as if its worker
had stopped just before them, which recovery already handles. Inside a caller's transaction the
flag is ignored (it would make the caller's whole transaction asynchronous); so it is with
AGENTRY_DB_ASYNC_COMMIT off, and on SQLite.
"""

import re
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction

from conversations.fencing import LeaseLost
from platform_site.cursors import statement_cursor

_REFERENCE = re.compile(r"\{(\w+)(?:\.(\w+))?\}")
# Evaluated by the statement's final SELECT: local to the transaction, which is the statement's
# own in autocommit, so the connection's setting is untouched once it ends.
ASYNCHRONOUS_COMMIT = "set_config('synchronous_commit', 'off', true)"


@dataclass
class _Write:
    name: str
    sql: str
    params: list
    returning: tuple[str, ...]
    read: bool = False  # a SELECT: what it reads is returned, and it writes nothing
    event: bool = False  # one of the batch's events, counted by `{events}`


class Batch:
    def __init__(self) -> None:
        self._writes: list[_Write] = []
        self._after: list[Callable[[dict[str, dict]], None]] = []
        # Set when an `after` callback writes too: then it shares the statement's transaction.
        self.transactional = False
        # Set when something outside the database will follow this commit and must find it on
        # disk (a side-effecting tool call marked started): the batch then commits synchronously,
        # whatever its caller asked.
        self.durable = False

    def add(self, name: str, sql: str, params=(), returning: tuple[str, ...] = (), *, event: bool = False) -> None:
        """Add a write; the first one added is the guard, and returns at least one column.
        With `event`, the write is one of the batch's events (`{events}` counts them); a second
        one needs a guard that bumps the run's event sequence by `{events}`."""
        if not self._writes and not returning:
            raise ValueError("the guard must return a column: it tells whether it matched")
        if self._writes and not _REFERENCE.search(sql):
            raise ValueError(f"write {name!r} would take effect whether or not the guard matched")
        if event and self.events and "{events}" not in self._writes[0].sql:
            raise ValueError(f"event {name!r}: the batch's guard numbers one event only")
        self._append(_Write(name, sql, list(params), tuple(returning), event=event))

    @property
    def events(self) -> int:
        """How many of the writes are events."""
        return sum(1 for write in self._writes if write.event)

    def read(self, name: str, sql: str, params=(), columns: tuple[str, ...] = ()) -> None:
        """Add a SELECT of at most one row (its `columns`), read in the same statement."""
        if not self._writes:
            raise ValueError("a batch starts with its guard")
        self._append(_Write(name, sql, list(params), tuple(columns), read=True))

    def _append(self, write: _Write) -> None:
        if write.name in ("guard", "events") or any(known.name == write.name for known in self._writes):
            raise ValueError(f"a batch has one write named {write.name!r}")
        self._writes.append(write)

    def after(self, callback: Callable[[dict[str, dict]], None]) -> None:
        """Call `callback` with what the writes returned, once they are written."""
        self._after.append(callback)

    def copy(self) -> "Batch":
        """The batch as it is now: what is added to either later is not added to the other."""
        copied = Batch()
        copied._writes, copied._after = list(self._writes), list(self._after)
        copied.transactional, copied.durable = self.transactional, self.durable
        return copied

    def narrow(self, where: str, params=()) -> None:
        """The guard matches only where it did and `where` (SQL on its row, with `params`) holds.
        The guard's SQL must end with its WHERE clause (conversations.services.run_guard's does)."""
        guard = self._writes[0]
        if " WHERE " not in guard.sql or guard.read:
            raise ValueError("only a guard that ends with its WHERE clause can be narrowed")
        self._writes[0] = _Write(
            guard.name, f"{guard.sql} AND ({where})", [*guard.params, *params], guard.returning, event=guard.event
        )

    def execute(self, *, asynchronous_commit: bool = False) -> dict[str, dict] | None:
        """The columns each write returned, by name (None where it returned no row); None if
        the guard matched nothing, and then nothing was written. `asynchronous_commit`: see
        the module."""
        if connection.vendor == "postgresql":
            # A transaction only when an `after` callback writes too: else the statement is its own.
            with transaction.atomic(savepoint=False) if self.transactional else nullcontext():
                return self._finish(self._one_statement(_asynchronous(asynchronous_commit and not self.durable)))
        with transaction.atomic(savepoint=False):
            return self._finish(self._one_by_one())

    def execute_rows(
        self, columns: str, rest: str, params=(), *, asynchronous_commit: bool = False
    ) -> tuple[dict[str, dict] | None, list[tuple]]:
        """The writes, then a read of any number of rows that names the guard's row as a table
        (by the guard's name, with the columns it returned): `columns` and `rest` (FROM …) of a
        SELECT. Returns what the writes returned (as execute) and the read's rows; (None, []) if
        the guard matched nothing, and then nothing was written and nothing read. The read must
        give at least one row when the guard matched (start it FROM the guard, joining the rest).

        On PostgreSQL one statement: the writes as WITH queries and the read as its query, each
        row led by the writes' returned columns; the read sees the database as the statement
        began, and the guard's row as the guard left it. SQLite: the writes one by one, then the
        read, in one transaction, the guard's row given to it as a VALUES table.
        `asynchronous_commit`: see the module."""
        guard = self._writes[0]
        if connection.vendor == "postgresql":
            # As execute: a transaction only when an `after` callback writes too.
            with transaction.atomic(savepoint=False) if self.transactional else nullcontext():
                asynchronous = _asynchronous(asynchronous_commit and not self.durable)
                results, rows = self._one_statement_rows(columns, rest, params, asynchronous)
                return self._finish(results), rows
        with transaction.atomic(savepoint=False):
            results = self._one_by_one()
            if results is None:
                return None, []
            values = [results[guard.name][column] for column in guard.returning]
            names = ", ".join(f'"{column}"' for column in guard.returning)
            placeholders = ", ".join(["%s"] * len(values))
            with connection.cursor() as cursor:
                cursor.execute(
                    f'WITH "{guard.name}" ({names}) AS (VALUES ({placeholders})) SELECT {columns} {rest}',
                    [*values, *params],
                )
                rows = cursor.fetchall()
            return self._finish(results), rows

    def _shape(self) -> tuple[tuple[str, str, tuple[str, ...], bool, bool], ...]:
        """The writes' SQL (not their values), the key of the statement built for them."""
        return tuple((write.name, write.sql, write.returning, write.read, write.event) for write in self._writes)

    def _params(self) -> list:
        return [param for write in self._writes for param in write.params]

    def _one_statement_rows(
        self, columns: str, rest: str, params, asynchronous: bool
    ) -> tuple[dict[str, dict] | None, list[tuple]]:
        queries, returned = _parts(self._shape())
        # Last, so that the read's columns keep their places; dropped from each row below.
        with statement_cursor() as cursor:
            cursor.execute(
                f"{queries} SELECT {returned}, {columns}{_commit_mode(asynchronous)} {rest}",
                [*self._params(), *params],
            )
            rows = cursor.fetchall()
        if not rows:
            return None, []
        width = sum(len(write.returning) for write in self._writes)
        end = -1 if asynchronous else None
        return self._results(rows[0][:width]), [row[width:end] for row in rows]

    def _finish(self, results: dict[str, dict] | None) -> dict[str, dict] | None:
        if results is not None:
            for callback in self._after:
                callback(results)
        return results

    def _one_statement(self, asynchronous: bool) -> dict[str, dict] | None:
        with statement_cursor() as cursor:
            cursor.execute(_statement(self._shape(), asynchronous), self._params())
            row = list(cursor.fetchone())
        if row[0] is None:
            return None
        return self._results(row)

    def _results(self, row) -> dict[str, dict]:
        """Each write's returned columns, by name, from the statement's leading columns."""
        results = {}
        for write in self._writes:
            results[write.name] = dict(zip(write.returning, row[: len(write.returning)]))
            row = row[len(write.returning) :]
        return results

    def _one_by_one(self) -> dict[str, dict] | None:
        results: dict[str, dict] = {}
        events = self.events

        def reference(match: re.Match) -> str:
            name, column = match.groups()
            if name == "events" and column is None:
                return str(events)
            if name == "guard":
                if column is None:
                    return "1 = 1"  # the statements after the guard run only if it matched
                name = self._writes[0].name
            value = results[name][column]
            if value is not None and not isinstance(value, int):
                raise TypeError(f"{{{name}.{column}}}: only integers are carried between statements")
            return "NULL" if value is None else str(value)

        with connection.cursor() as cursor:
            for index, write in enumerate(self._writes):
                sql = _REFERENCE.sub(reference, write.sql) + _returning(write.returning, write.read)
                cursor.execute(sql, write.params)
                rows = cursor.fetchall() if write.returning else []
                if index == 0 and not rows:
                    return None
                results[write.name] = dict(zip(write.returning, rows[0])) if rows else dict.fromkeys(write.returning)
        return results


def batch_commit(batch: Batch, run_id, *, asynchronous: bool = True) -> dict[str, dict]:
    """Execute a step's batch (asynchronously committed unless told otherwise: see the module);
    LeaseLost if its guard, the run's lease fence, found the run no longer this worker's."""
    results = batch.execute(asynchronous_commit=asynchronous)
    if results is None:
        raise LeaseLost(str(run_id))
    return results


class PendingCommit:
    """A step's last commit, not made yet: the run's next statement makes it together with its
    own writes (`take`), or it is made on its own (`commit`). Nothing outside the database waits
    on it (engine.loop holds one, a tool step's, for the model call that follows).

    One slot: whoever takes the batch is the one to commit it, so it is made at most once."""

    def __init__(self, batch: Batch, run_id) -> None:
        self._batch: Batch | None = batch
        self.run_id = run_id

    def __bool__(self) -> bool:
        return self._batch is not None

    def take(self) -> Batch | None:
        """The batch, now the caller's to commit (with its own writes); None if it was taken."""
        batch, self._batch = self._batch, None
        return batch

    def commit(self) -> None:
        """Commit the batch on its own if nobody took it (asynchronously, as it would have been
        made at once); LeaseLost if the worker lost the run meanwhile: it is not recorded."""
        batch = self.take()
        if batch is not None:
            batch_commit(batch, self.run_id)


def _asynchronous(asked: bool) -> bool:
    """Whether a PostgreSQL batch asked to commit asynchronously does: only as a transaction of
    its own (outside any atomic block, its own included) and with the setting on."""
    return asked and settings.AGENTRY_DB_ASYNC_COMMIT and not connection.in_atomic_block


def _commit_mode(asynchronous: bool) -> str:
    """What a batch's final SELECT adds last to commit asynchronously: nothing otherwise."""
    return f", {ASYNCHRONOUS_COMMIT}" if asynchronous else ""


@lru_cache(maxsize=512)
def _statement(shape: tuple[tuple[str, str, tuple[str, ...], bool, bool], ...], asynchronous: bool = False) -> str:
    """The one statement of a batch's writes, given as (name, sql, returning, read, event) each; with
    `asynchronous`, its transaction commits asynchronously (the value it adds last is ignored).

    A step's batch has the same writes (their SQL, not their values) every time it is made, so
    the statement is put together once per shape: rewriting every reference and joining the
    queries on each execution took about a tenth of a batch's CPU (0.15 of 1.5 ms, in-process)."""
    queries, returned = _parts(shape)
    return f"{queries} SELECT {returned}{_commit_mode(asynchronous)}"


@lru_cache(maxsize=512)
def _parts(shape: tuple[tuple[str, str, tuple[str, ...], bool, bool], ...]) -> tuple[str, str]:
    """The WITH clause of a batch's writes, and the columns that select what each returned."""
    guard = shape[0][0]
    events = sum(1 for write in shape if write[4])

    def reference(match: re.Match) -> str:
        name, column = match.groups()
        if name == "events" and column is None:
            return str(events)
        if name == "guard":
            if column is None:
                return f'EXISTS (SELECT 1 FROM "{guard}")'
            name = guard
        return f'(SELECT "{column}" FROM "{name}")'

    queries = [
        f'"{name}" AS ({_REFERENCE.sub(reference, sql) + _returning(returning, read)})'
        for name, sql, returning, read, _ in shape
    ]
    # One row always comes back; the guard's first column is NULL if it matched nothing.
    columns = [f'(SELECT "{column}" FROM "{name}")' for name, _, returning, _, _ in shape for column in returning]
    return f"WITH {', '.join(queries)}", ", ".join(columns)


def _returning(returning: tuple[str, ...], read: bool) -> str:
    if read or not returning:
        return ""
    return " RETURNING " + ", ".join(f'"{column}"' for column in returning)
