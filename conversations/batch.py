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

A write is an Update (a read a Select), built from the models' fields rather than written as SQL:
the engine says what it writes in the models' terms (fields, values, increments, conditions such
as `exists`, with `Row` for a field of the written row and `Ref` for a reference), and the
builder owns the rest: tables, columns and quoting, the values prepared for their fields as the
ORM would send them (platform_site.prep), the guard's `AND {guard}`. SQL given as text (with its
parameters) is still taken, for writes outside the engine that the builder does not express (an upsert).

The ledger's own writes come last, each added to a batch: the run's guard (`run_guard`: the
lease's fence, its extension and the event sequence's bump), its events (`event_add`), a
step's messages (`messages_add`) and any row inserted or updated (`row_insert`, `row_update`).

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
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property, partial

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import Model
from django.utils import timezone

from conversations.events import SETTLING_EVENT_TYPES
from conversations.fencing import LeaseLost, lease_deadline
from conversations.models import Conversation, Message, Run, RunEvent, RunStatus
from conversations.wakeups import publish_run_event
from platform_site.prep import prep_save

_REFERENCE = re.compile(r"\{(\w+)(?:\.(\w+))?\}")
# Evaluated by the statement's final SELECT: local to the transaction, which is the statement's
# own in autocommit, so the connection's setting is untouched once it ends.
ASYNCHRONOUS_COMMIT = "set_config('synchronous_commit', 'off', true)"


# The builder of a batch's writes (Update) and reads (Select): see the module.


@dataclass(frozen=True)
class Ref:
    """A value the batch resolves (`{events}`, `{name.column}`: see the module), plus `plus`."""

    name: str
    plus: int = 0


@dataclass(frozen=True)
class Row:
    """A field of the row the statement writes: in SET its value before the write, in a subquery
    the outer row's (which correlates the subquery with that row)."""

    field: str


@dataclass(frozen=True)
class Plus:
    """An increment: the field's value plus `amount` (a value for the field, or a Ref)."""

    amount: object


@dataclass(frozen=True)
class Is:
    """`field` compared with `value` (a value for the field, a Row or a Ref) by `op`: "=", "<>",
    "<", ">" or "in" (over a tuple of values). None is NULL; a boolean equality is the column or its
    negation, as the ledger's partial indexes state their predicates."""

    field: str
    value: object
    op: str = "="


@dataclass(frozen=True)
class Or:
    """Any of the conditions holds."""

    conditions: tuple["Condition", ...]

    @cached_property
    def key(self) -> tuple:
        return _keyed(("or",), self.conditions)


@dataclass(frozen=True)
class Exists:
    """Some row of `model` meets every condition; `~` negates it."""

    model: type[Model]
    conditions: tuple["Condition", ...]
    negated: bool = False

    def __invert__(self) -> "Exists":
        return Exists(self.model, self.conditions, not self.negated)

    @cached_property
    def key(self) -> tuple:
        return _keyed(("exists", self.model, self.negated), self.conditions)


@dataclass(frozen=True)
class Count:
    """As a value: the number of rows of `model` that meet every condition, plus `plus`."""

    model: type[Model]
    conditions: tuple["Condition", ...]
    plus: int = 0

    @cached_property
    def key(self) -> tuple:
        return _keyed(("count", self.model, self.plus), self.conditions)


Condition = Is | Or | Exists
_OPS = {"": "=", "ne": "<>", "lt": "<", "in": "in"}


def _conditions(conditions: tuple, lookups: dict) -> tuple:
    """`conditions`, then keyword lookups spelled as Django's: `status=…`, `status__in=(…)`, `id__ne=…`."""
    more = []
    for key, value in lookups.items():
        name, _, op = key.partition("__")
        more.append(Is(name, value, _OPS[op]))
    return (*conditions, *more)


def exists(model: type[Model], *conditions: Condition, **lookups) -> Exists:
    return Exists(model, _conditions(conditions, lookups))


def either(*conditions: Condition, **lookups) -> Or:
    return Or(_conditions(conditions, lookups))


def count(model: type[Model], *conditions: Condition, plus: int = 0, **lookups) -> Count:
    return Count(model, _conditions(conditions, lookups), plus)


@dataclass(frozen=True)
class Update:
    """An UPDATE of `model` (Batch.add): `set`, `add` (increments) and `where` return a new one.
    As the batch's guard it matches on its own; as a later write, only where the guard matched."""

    model: type[Model]
    assignments: tuple[tuple[str, object], ...] = ()
    conditions: tuple[Condition, ...] = ()

    def set(self, **values) -> "Update":
        return Update(self.model, (*self.assignments, *values.items()), self.conditions)

    def add(self, **amounts) -> "Update":
        return self.set(**{name: Plus(amount) for name, amount in amounts.items()})

    def where(self, *conditions: Condition, **lookups) -> "Update":
        return Update(self.model, self.assignments, _conditions((*self.conditions, *conditions), lookups))

    def render(self, *, guarded: bool) -> tuple[str, list]:
        """The SQL and its parameters; `guarded`: a write after the guard (`AND {guard}`)."""
        if not self.assignments:
            raise ValueError(f"an UPDATE of {self.model.__name__} sets nothing")
        values: list = []
        sets = tuple([(name, _value_key(value, values)) for name, value in self.assignments])
        key = (sets, tuple([_condition_key(condition, values) for condition in self.conditions]))
        return _bound(_update_sql(self.model, key, guarded), values)


@dataclass(frozen=True)
class Select:
    """A read of at most one row's `fields` of `model` (Batch.read)."""

    model: type[Model]
    fields: tuple[str, ...]
    conditions: tuple[Condition, ...] = ()

    def where(self, *conditions: Condition, **lookups) -> "Select":
        return Select(self.model, self.fields, _conditions((*self.conditions, *conditions), lookups))

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.model._meta.get_field(name).column for name in self.fields)

    def render(self) -> tuple[str, list]:
        values: list = []
        key = tuple([_condition_key(condition, values) for condition in self.conditions])
        return _bound(_select_sql(self.model, self.fields, key), values)


def rendered(model: type[Model], name: str, value) -> tuple[str, list]:
    """`value` (a Ref, a Count, a value) for field `name` of `model`, as SQL and its parameters."""
    values: list = []
    return _bound(_value_sql(model, name, _value_key(value, values)), values)


# A statement is rendered in two halves: its key (what its SQL depends on, values left out), from
# which its SQL is put together, and its values, prepared for their fields. A condition that is a
# module constant is keyed once.
_PARAM = "%s"


def _keyed(head: tuple, conditions: tuple) -> tuple:
    values: list = []
    return (*head, tuple([_condition_key(condition, values) for condition in conditions])), tuple(values)


def _value_key(value, values: list):
    kind = type(value)
    if kind is Plus:
        return ("+", _value_key(value.amount, values))
    if kind is Ref:
        return ("ref", value.name, value.plus)
    if kind is Row:
        return ("row", value.field)
    if kind is Count:
        values += value.key[1]
        return value.key[0]
    if value is None:
        return None
    values.append(value)
    return _PARAM


def _condition_key(condition: Condition, values: list) -> tuple:
    if type(condition) is not Is:
        values += condition.key[1]
        return condition.key[0]
    field, value, op = condition.field, condition.value, condition.op
    if op == "in":
        if not value:
            raise ValueError(f"{field} IN nothing")
        values += value
        return ("is", field, op, len(value))
    if type(value) is bool and op == "=":
        return ("is", field, op, value)
    return ("is", field, op, _value_key(value, values))


def _bound(template: tuple[str, tuple], values: list) -> tuple[str, list]:
    sql, fields = template
    wrapper = connections[DEFAULT_DB_ALIAS]
    return sql, [prep_save(field, value, wrapper) for field, value in zip(fields, values, strict=True)]


def _update_sql(model: type[Model], key: tuple, guarded: bool) -> tuple[str, tuple]:
    sets, conditions = key
    sql = _Sql(model)
    assignments = ", ".join(sql.assignment(name, value) for name, value in sets)
    where = [*map(sql.condition, conditions), *(["{guard}"] if guarded else [])]
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return f'UPDATE "{model._meta.db_table}" SET {assignments}{clause}', tuple(sql.fields)


def _select_sql(model: type[Model], names: tuple[str, ...], key: tuple) -> tuple[str, tuple]:
    sql = _Sql(model)
    columns = ", ".join(f'"{model._meta.get_field(name).column}"' for name in names)
    return f'SELECT {columns} FROM "{model._meta.db_table}"{sql.where(key)}', tuple(sql.fields)


def _value_sql(model: type[Model], name: str, key) -> tuple[str, tuple]:
    sql = _Sql(model)
    return sql.value(model._meta.get_field(name), key), tuple(sql.fields)


class _Sql:
    """A statement's SQL from its key: `model`'s table (aliased in a subquery) within the
    statement's own (`top`, whose row Row names), and the field of each parameter, in order."""

    def __init__(self, model: type[Model], top: type[Model] | None = None, fields: list | None = None) -> None:
        self.model, self.top = model, top
        self.alias = model.__name__[0].lower() if top is not None else ""
        self.fields = [] if fields is None else fields

    def _inner(self, model: type[Model], conditions: tuple) -> str:
        """FROM … WHERE … of a subquery on `model`."""
        inner = _Sql(model, self.top or self.model, self.fields)
        return f'"{model._meta.db_table}" {inner.alias}{inner.where(conditions)}'

    def where(self, conditions: tuple) -> str:
        return f" WHERE {' AND '.join(map(self.condition, conditions))}" if conditions else ""

    def value(self, field, key) -> str:
        if key is _PARAM:
            self.fields.append(field)
            return "%s"
        if key is None:
            return "NULL"
        tag = key[0]
        if tag == "ref":
            _, name, plus = key
            return f"{{{name}}}" + (f" {'+' if plus > 0 else '-'} {abs(plus):d}" if plus else "")
        if tag == "row":
            column = f'"{(self.top or self.model)._meta.get_field(key[1]).column}"'
            return f'"{self.top._meta.db_table}".{column}' if self.top else column
        _, model, plus, conditions = key  # a count
        return f"(SELECT COUNT(*) + {plus:d} FROM {self._inner(model, conditions)})"

    def assignment(self, name: str, key) -> str:
        field = self.model._meta.get_field(name)
        column = f'"{field.column}"'  # SET names its own table's columns, never an alias
        if type(key) is tuple and key[0] == "+":
            return f"{column} = {column} + {self.value(field, key[1])}"
        return f"{column} = {self.value(field, key)}"

    def condition(self, key: tuple) -> str:
        tag = key[0]
        if tag == "or":
            return f"({' OR '.join(map(self.condition, key[1]))})"
        if tag == "exists":
            _, model, negated, conditions = key
            return f"{'NOT ' if negated else ''}EXISTS (SELECT 1 FROM {self._inner(model, conditions)})"
        _, name, op, value = key
        field = self.model._meta.get_field(name)
        column = f'{self.alias}."{field.column}"' if self.alias else f'"{field.column}"'
        if op == "in":
            self.fields += [field] * value
            return f"{column} IN ({', '.join(['%s'] * value)})"
        if type(value) is bool:
            return column if value else f"NOT {column}"
        if value is None:
            return f"{column} IS {'NOT ' if op == '<>' else ''}NULL"
        return f"{column} {op} {self.value(field, value)}"


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

    def add(
        self, name: str, sql: str | Update, params=(), returning: tuple[str, ...] = (), *, event: bool = False
    ) -> None:
        """Add a write: an Update, or SQL with `params`; the first one added is the guard, and
        returns at least one column. With `event`, the write is one of the batch's events
        (`{events}` counts them); a second one needs a guard that bumps the run's event sequence
        by `{events}`."""
        if isinstance(sql, Update):
            if params:
                raise ValueError(f"write {name!r}: an Update brings its own parameters")
            sql, params = sql.render(guarded=bool(self._writes))
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

    def read(self, name: str, sql: str | Select, params=(), columns: tuple[str, ...] = ()) -> None:
        """Add a SELECT of at most one row (its `columns`), read in the same statement: a Select,
        or SQL with `params`."""
        if not self._writes:
            raise ValueError("a batch starts with its guard")
        if isinstance(sql, Select):
            columns = sql.columns
            sql, params = sql.render()
        self._append(_Write(name, sql, list(params), tuple(columns), read=True))

    def _append(self, write: _Write) -> None:
        if write.name in ("guard", "events") or any(known.name == write.name for known in self._writes):
            raise ValueError(f"a batch has one write named {write.name!r}")
        self._writes.append(write)

    def after(self, callback: Callable[[dict[str, dict]], None]) -> None:
        """Call `callback` with what the writes returned, once they are written."""
        self._after.append(callback)

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

    def _shape(self) -> tuple[tuple[str, str, tuple[str, ...], bool, bool], ...]:
        """The writes' SQL (not their values), the key of the statement built for them."""
        return tuple((write.name, write.sql, write.returning, write.read, write.event) for write in self._writes)

    def _params(self) -> list:
        return [param for write in self._writes for param in write.params]

    def _finish(self, results: dict[str, dict] | None) -> dict[str, dict] | None:
        if results is not None:
            for callback in self._after:
                callback(results)
        return results

    def _one_statement(self, asynchronous: bool) -> dict[str, dict] | None:
        with connection.cursor() as cursor:
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


def _asynchronous(asked: bool) -> bool:
    """Whether a PostgreSQL batch asked to commit asynchronously does: only as a transaction of
    its own (outside any atomic block, its own included) and with the setting on."""
    return asked and settings.AGENTRY_DB_ASYNC_COMMIT and not connection.in_atomic_block


def _commit_mode(asynchronous: bool) -> str:
    """What a batch's final SELECT adds last to commit asynchronously: nothing otherwise."""
    return f", {ASYNCHRONOUS_COMMIT}" if asynchronous else ""


def _statement(shape: tuple[tuple[str, str, tuple[str, ...], bool, bool], ...], asynchronous: bool = False) -> str:
    """The one statement of a batch's writes, given as (name, sql, returning, read, event) each; with
    `asynchronous`, its transaction commits asynchronously (the value it adds last is ignored)."""
    queries, returned = _parts(shape)
    return f"{queries} SELECT {returned}{_commit_mode(asynchronous)}"


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


# --- The ledger's writes, as writes of a batch


def db_value(model, field: str, value):
    """`value` as the database takes it for `model.field` in a raw statement."""
    return prep_save(model._meta.get_field(field), value, connections[DEFAULT_DB_ALIAS])


def row_insert(
    batch: Batch,
    name: str,
    row,
    *,
    exprs: dict[str, Ref | Count] | None = None,
    returning=("id",),
    guard: bool = False,
    conflict: tuple[str, ...] = (),
) -> None:
    """The INSERT of `row` (an unsaved model instance) as a write of the batch, made only if its
    guard matched; with `guard`, the INSERT is the batch's guard (it always matches). `exprs`
    give some fields' values as a Ref (a value another write returns) or a Count; a row with
    an automatic id gets it when the batch is executed (a row whose id is set, a UUID, keeps it).
    `conflict`: fields a unique constraint covers; a row they match already is left as it is and
    this one is not written (its id stays None)."""
    exprs = exprs or {}
    wrapper = connections[DEFAULT_DB_ALIAS]  # looked up once, not once per value
    # An automatic id is the database's to give; an id with a default (a UUID) is sent.
    fields = [field for field in row._meta.concrete_fields if not (field.primary_key and field.db_returning)]
    values, params = [], []
    for field in fields:
        if field.name in exprs:
            sql, more = rendered(row._meta.model, field.name, exprs[field.name])
            values.append(sql)
            params += more
        else:
            values.append("%s")
            params.append(prep_save(field, field.pre_save(row, True), wrapper))
    columns = ", ".join(f'"{field.column}"' for field in fields)
    condition = "" if guard else " WHERE {guard}"
    on_conflict = ""
    if conflict:
        if guard:  # a guard that skipped its row would read as "did not match"
            raise ValueError("the batch's guard cannot skip its row on a conflict")
        # After INSERT … SELECT, SQLite reads ON CONFLICT only behind a WHERE, which there is.
        targets = ", ".join(f'"{row._meta.get_field(field).column}"' for field in conflict)
        on_conflict = f" ON CONFLICT ({targets}) DO NOTHING"
    sql = f'INSERT INTO "{row._meta.db_table}" ({columns}) SELECT {", ".join(values)}{condition}{on_conflict}'
    batch.add(name, sql, params, returning)

    def written(results: dict) -> None:
        if conflict and results[name]["id"] is None:
            return  # a row the constraint matched was there already: this one was not written
        if row.pk is None:  # a UUID id is the row's own already (SQLite returns it as text)
            row.pk = results[name]["id"]
        row._state.adding = False

    batch.after(written)


def row_update(batch: Batch, name: str, row, **values) -> None:
    """The UPDATE of `row`'s `values` (by field name) as a write of the batch, made only if
    its guard matched; the instance gets the values too."""
    batch.add(name, Update(row._meta.model, tuple(values.items()), (Is("id", row.pk),)))
    for field_name, value in values.items():
        setattr(row, row._meta.get_field(field_name).attname, value)


# The guard's sequence bump, numbering the batch's events; and its assignment that changes nothing.
_EVENTS_NUMBERED, _UNCHANGED = Plus(Ref("events")), Row("event_seq")


def run_guard(
    batch: Batch,
    *,
    run_id,
    lease_owner: str | None,
    event: bool = True,
    extends_lease: bool = True,
    sets: Mapping[str, object] | None = None,
    where: tuple[Condition, ...] = (),
    returning: tuple[str, ...] = (),
) -> None:
    """The batch's guard, on the run row. With `lease_owner`, the worker must still hold the
    run's lease, which is extended (the fence) unless `extends_lease` is false (`sets` then say
    what becomes of it: engine.transitions.transition_guard); `event` bumps the sequence by the number of the
    batch's events, which take the numbers it hands out; `sets` are more assignments on the row
    (field: value, or Plus for the run's totals); `where` further conditions on it;
    `returning` more columns of the row as the guard left it (the run a step hands to the next,
    conversations.selectors.STEP_RUN_COLUMNS)."""
    assignments = [("event_seq", _EVENTS_NUMBERED)] if event else []
    if lease_owner is not None and extends_lease:
        assignments.append(("lease_expires_at", lease_deadline()))
    if sets:
        assignments += sets.items()
    if not assignments:  # nothing to change: the row is still matched (and locked) for the others
        assignments.append(("event_seq", _UNCHANGED))
    conditions = [Is("id", run_id)]
    if lease_owner is not None:
        conditions += [Is("lease_owner", lease_owner), Is("status", RunStatus.RUNNING)]
    columns = ("id", "event_seq", *(column for column in returning if column not in ("id", "event_seq")))
    batch.add("run", Update(Run, tuple(assignments), (*conditions, *where)), returning=columns)


# --- Run-event listeners


@dataclass(frozen=True)
class RunEventListener:
    """An app above the ledger that records something of a run's events (notifications: a
    webhook delivery per event a webhook hears), registered from its AppConfig.ready(): the
    ledger names none of them.

    `event_types`: the events it may hear. `hears`: whether it hears a run, as a condition on the
    run's row (an Exists correlated with it by Row), read once per event of those types, or by
    the caller's own statement (listening_read). `written(event)`: once a heard event's statement
    has run, in its transaction (the batch then is one), so the event and what the listener
    records commit together or not at all: an event that happened is heard (at least once), one
    rolled back (a lost lease) is not.

    After the statement and not inside it: a listener's record is built from the run as that
    statement left it (a webhook's payload holds its status, answer, usage and cost), which the
    statement's own queries cannot see (each sees the database as it was when it began)."""

    event_types: frozenset[str]
    hears: Exists
    written: Callable[[RunEvent], None]


# Filled at start-up by the apps above this one, from their AppConfig.ready().
_listeners: list[RunEventListener] = []


def run_event_listener_register(listener: RunEventListener) -> None:
    """Call `listener` for the events it hears; registering the same again is a no-op (ready()
    may run more than once in a process, as in tests)."""
    if listener not in _listeners:
        _listeners.append(listener)


def _heard(run_id, listeners: list[RunEventListener]) -> Select:
    """A read of the run's id if one of `listeners` hears it (no row otherwise)."""
    return Select(Run, ("id",)).where(Is("id", run_id), either(*(listener.hears for listener in listeners)))


def run_listened(*, run_id, listeners: list[RunEventListener] | None = None) -> bool:
    """Whether one of `listeners` (all by default) hears the run, in one read through its row."""
    listeners = _listeners if listeners is None else listeners
    if not listeners:
        return False
    with connection.cursor() as cursor:
        cursor.execute(*_heard(run_id, listeners).render())
        return cursor.fetchone() is not None


def run_listened_for(*, run_id, type: str) -> bool:
    """Whether a listener taking events of `type` hears the run (no read when none takes them):
    for a caller appending many events of one type (a model call's text deltas), read once."""
    listeners = [listener for listener in _listeners if type in listener.event_types]
    return bool(listeners) and run_listened(run_id=run_id, listeners=listeners)


def listening_read(batch: Batch, *, run_id) -> Callable[[dict], bool]:
    """Read in `batch` whether a listener hears the run (event_add's `listening`, for an event a
    later batch adds), instead of by a read of its own; returns what tells it from the batch's
    results."""
    if not _listeners:
        return lambda results: False
    batch.read("listening", _heard(run_id, _listeners))
    return lambda results: results["listening"]["id"] is not None


def unheard() -> tuple[Exists, ...]:
    """Conditions on a run's row under which no listener hears the run, for a guard that must
    not match such a run (a commit whose transaction is its statement alone)."""
    return tuple(~listener.hears for listener in _listeners)


def event_add(
    batch: Batch,
    *,
    run_id,
    type: str,
    payload: dict,
    fill: dict[str, str] | None = None,
    listening: bool | None = None,
    wake: bool = True,
) -> RunEvent:
    """One of the batch's events, numbered by its guard's bump of the run's event sequence: a
    batch's events take its numbers in the order they are added. `fill`:
    payload keys whose values an earlier write of the batch returns ({"llm_call_id": "call.id"}).
    `listening`: whether a listener hears the run, when the caller read it already (the commit of
    a run's final answer reads it for the ending that follows: listening_read); else it is read
    here if a listener takes the event's type (RunEventListener). `wake`: whether the run's
    streams are woken once it commits; not for the first event of a run the same batch inserts,
    which nothing can watch yet (its id is known only to the caller until then). The RunEvent
    returned is complete once the batch is executed."""
    now = timezone.now()
    value = "%s"
    if fill:
        # The values exist only inside the statement: they are merged into the payload there.
        if connection.vendor == "postgresql":
            pairs = ", ".join(f"'{key}', {{{reference}}}" for key, reference in fill.items())
            value = f"%s || jsonb_build_object({pairs})"
        else:
            pairs = ", ".join(f"'$.{key}', {{{reference}}}" for key, reference in fill.items())
            value = f"json_set(%s, {pairs})"
    place = batch.events + 1
    name = "event" if place == 1 else f"event_{place}"
    batch.add(
        name,
        f'INSERT INTO "{RunEvent._meta.db_table}" ("run_id", "seq", "type", "payload", "created_at") '
        f"SELECT %s, {{guard.event_seq}} - {{events}} + {place}, %s, {value}, %s WHERE {{guard}}",
        [
            db_value(RunEvent, "run", run_id),
            type,
            connection.ops.adapt_json_value(payload, None),
            db_value(RunEvent, "created_at", now),
        ],
        ("id", "seq"),
        event=True,
    )
    event = RunEvent(run_id=run_id, type=type, payload=payload, created_at=now)
    listeners = [listener for listener in _listeners if type in listener.event_types]
    if not listeners:
        listening = False
    elif listening is None:
        listening = run_listened(run_id=run_id, listeners=listeners)

    def written(results: dict) -> None:
        event.id, event.seq = results[name]["id"], results[name]["seq"]
        event._state.adding = False
        for key, reference in (fill or {}).items():
            write, column = reference.split(".")
            payload[key] = results[write][column]
        if listening:
            for listener in listeners:
                listener.written(event)
        # Streams read rows; the wake-up only tells them to look, once the row is visible.
        if wake:
            settles = type in SETTLING_EVENT_TYPES
            transaction.on_commit(partial(publish_run_event, run_id, settles=settles), robust=True)

    batch.transactional |= listening
    batch.after(written)
    return event


def messages_add(batch: Batch, *, conversation_id, run_id, messages: list[dict]) -> list[Message]:
    """Append a step's messages (dicts of Message fields) in order, as writes of its batch,
    after its guard: the conversation's counter, bumped under its row lock, hands out their
    orders. The Messages returned are complete once the batch is executed. One write a message
    suits the few a step appends; messages_append takes any number."""
    counter = Update(Conversation).add(message_count=len(messages)).where(id=conversation_id)
    batch.add("counter", counter, returning=("message_count",))
    rows = [Message(conversation_id=conversation_id, run_id=run_id, **fields) for fields in messages]
    for index, row in enumerate(rows):
        later = len(rows) - 1 - index
        row_insert(batch, f"message_{index}", row, exprs={"order": Ref("counter.message_count", -later)})

    def written(results: dict) -> None:
        for index, row in enumerate(rows):
            row.order = results["counter"]["message_count"] - (len(rows) - 1 - index)

    batch.after(written)
    return rows


def run_event_append(
    *,
    run_id,
    type: str,
    payload: dict | None = None,
    lease_owner: str | None = None,
    listening: bool | None = None,
) -> RunEvent:
    """Append an event to the run's timeline.

    With `lease_owner`, the same statement checks that this worker still holds the run's lease
    and extends it, so a step's commit is fenced at no extra cost (LeaseLost otherwise).
    `listening`: event_add's, when the caller read it already (run_listened_for).
    """
    batch = Batch()
    run_guard(batch, run_id=run_id, lease_owner=lease_owner)
    event = event_add(batch, run_id=run_id, type=type, payload=payload or {}, listening=listening)
    if batch.execute() is None:
        if lease_owner is not None:
            raise LeaseLost(str(run_id))
        raise Run.DoesNotExist(f"Run {run_id} does not exist")
    return event
