"""The low-level ledger writes: counters, fenced run events, message appends, new conversations.

These are the record's own writes, shared by every app that changes it. A run's status never
changes here: that is engine.runs (and the engine modules that call it).

The writes of one commit of a step join a Batch (conversations.batch), so that they commit
together, in one statement on PostgreSQL. Its guard is usually the UPDATE of the run row
(`run_guard`): it checks that the worker still holds the run's lease and extends it (the fence,
at no extra cost), and bumps the run's event sequence for the batch's event (engine.transitions
guards with the status change instead). `run_event_append` and `messages_append` write alone.
"""

from functools import partial

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from agents.models import Agent
from conversations.batch import Batch
from conversations.events import SETTLING_EVENT_TYPES, WEBHOOK_EVENT_TYPES
from conversations.fencing import LeaseLost, lease_deadline
from conversations.models import Conversation, Message, Run, RunEvent, RunStatus
from conversations.wakeups import publish_run_event
from conversations.webhooks import webhook_deliveries_create, webhooks_listening
from platform_site.cursors import statement_cursor
from platform_site.prep import prep_save

_RUN = Run._meta.db_table


def _bump(model, pk, field: str, by: int = 1) -> int:
    """Atomically add `by` to a counter column and return the new value, in one statement.

    The row lock it takes is held to the end of the caller's transaction, which is what
    serialises concurrent writers of message orders.
    """
    table = model._meta.db_table
    column = model._meta.get_field(field).column
    key = model._meta.pk.get_db_prep_value(pk, connection)
    pk_column = model._meta.pk.column
    with statement_cursor() as cursor:
        cursor.execute(
            f'UPDATE "{table}" SET "{column}" = "{column}" + %s WHERE "{pk_column}" = %s RETURNING "{column}"',
            [by, key],
        )
        row = cursor.fetchone()
    if row is None:
        raise model.DoesNotExist(f"{model.__name__} {pk} does not exist")
    return row[0]


def db_value(model, field: str, value):
    """`value` as the database takes it for `model.field` in a raw statement."""
    return prep_save(model._meta.get_field(field), value, connections[DEFAULT_DB_ALIAS])


def row_insert(
    batch: Batch,
    name: str,
    row,
    *,
    exprs: dict[str, tuple[str, list]] | None = None,
    returning=("id",),
    guard: bool = False,
    conflict: tuple[str, ...] = (),
) -> None:
    """The INSERT of `row` (an unsaved model instance) as a write of the batch, made only if its
    guard matched; with `guard`, the INSERT is the batch's guard (it always matches). `exprs`
    give some columns as SQL with its params instead (a value another write returns); a row with
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
            sql, more = exprs[field.name]
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


def rows_insert_new(rows: list, *, unique: tuple[str, ...], key: str) -> list:
    """INSERT, in one statement, those of `rows` (unsaved instances of one model with an automatic
    id) that no existing row matches on the `unique` columns, which a unique constraint covers.
    Returns the rows inserted, with their ids; `key` (a column unique among `rows`) tells which."""
    if not rows:
        return []
    model = type(rows[0])
    wrapper = connections[DEFAULT_DB_ALIAS]
    fields = [field for field in model._meta.concrete_fields if not field.primary_key]
    params = [prep_save(field, field.pre_save(row, True), wrapper) for row in rows for field in fields]
    placeholders = ", ".join(["(" + ", ".join(["%s"] * len(fields)) + ")"] * len(rows))
    columns = ", ".join(f'"{field.column}"' for field in fields)
    target = ", ".join(f'"{model._meta.get_field(name).column}"' for name in unique)
    key_field = model._meta.get_field(key)
    with statement_cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{model._meta.db_table}" ({columns}) VALUES {placeholders} '
            f'ON CONFLICT ({target}) DO NOTHING RETURNING "id", "{key_field.column}"',
            params,
        )
        ids = {value: pk for pk, value in cursor.fetchall()}
    inserted = []
    for row in rows:
        value = prep_save(key_field, getattr(row, key_field.attname), wrapper)
        if value in ids:
            row.pk = ids[value]
            row._state.adding = False
            inserted.append(row)
    return inserted


def row_update(batch: Batch, name: str, row, **values) -> None:
    """The UPDATE of `row`'s `values` (by field name) as a write of the batch, made only if
    its guard matched; the instance gets the values too."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    assignments, params = [], []
    for field_name, value in values.items():
        field = row._meta.get_field(field_name)
        assignments.append(f'"{field.column}" = %s')
        params.append(prep_save(field, value, wrapper))
        setattr(row, field.attname, value)
    batch.add(
        name,
        f'UPDATE "{row._meta.db_table}" SET {", ".join(assignments)} WHERE "id" = %s AND {{guard}}',
        [*params, row.pk],
    )


def run_guard(
    batch: Batch,
    *,
    run_id,
    lease_owner: str | None,
    event: bool = True,
    extends_lease: bool = True,
    sets: str = "",
    params=(),
    where: str = "",
    where_params=(),
    returning: tuple[str, ...] = (),
) -> None:
    """The batch's guard, on the run row. With `lease_owner`, the worker must still hold the
    run's lease, which is extended (the fence) unless `extends_lease` is false (`sets` then say
    what becomes of it: engine.transitions.transition_guard); `event` bumps the sequence by the number of the
    batch's events, which take the numbers it hands out; `sets` are more assignments on the row
    (the run's totals), with `params`; `where` a further condition, with `where_params`;
    `returning` more columns of the row as the guard left it (the run a step hands to the next,
    conversations.selectors.STEP_RUN_COLUMNS)."""
    assignments = ['"event_seq" = "event_seq" + {events}'] if event else []
    values = []
    if lease_owner is not None and extends_lease:
        assignments.append('"lease_expires_at" = %s')
        values.append(db_value(Run, "lease_expires_at", lease_deadline()))
    if sets:
        assignments.append(sets)
        values += params
    if not assignments:  # nothing to change: the row is still matched (and locked) for the others
        assignments.append('"event_seq" = "event_seq"')
    values.append(db_value(Run, "id", run_id))
    condition = '"id" = %s'
    if lease_owner is not None:
        condition += ' AND "lease_owner" = %s AND "status" = %s'
        values += [lease_owner, RunStatus.RUNNING]
    if where:
        condition += f" AND {where}"
        values += where_params
    columns = ("id", "event_seq", *(column for column in returning if column not in ("id", "event_seq")))
    batch.add("run", f'UPDATE "{_RUN}" SET {", ".join(assignments)} WHERE {condition}', values, columns)


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
    `listening`: whether a webhook hears the run, when the caller read it already (the commit of
    a run's final answer reads it for the ending that follows); else it is read here if the event
    is one webhooks are sent. `wake`: whether the run's streams are woken once it commits; not for
    the first event of a run the same batch inserts, which nothing can watch yet (its id is known
    only to the caller until then). The RunEvent returned is complete once the batch is executed."""
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
    # Webhook deliveries are written with their event, in its transaction.
    if type not in WEBHOOK_EVENT_TYPES:
        listening = False
    elif listening is None:
        listening = webhooks_listening(run_id=run_id)

    def written(results: dict) -> None:
        event.id, event.seq = results[name]["id"], results[name]["seq"]
        event._state.adding = False
        for key, reference in (fill or {}).items():
            write, column = reference.split(".")
            payload[key] = results[write][column]
        if listening:
            webhook_deliveries_create(event=event)
        # Streams read rows; the wake-up only tells them to look, once the row is visible.
        if wake:
            settles = type in SETTLING_EVENT_TYPES
            transaction.on_commit(partial(publish_run_event, run_id, settles=settles), robust=True)

    batch.transactional |= listening
    batch.after(written)
    return event


def run_event_append(*, run_id, type: str, payload: dict | None = None, lease_owner: str | None = None) -> RunEvent:
    """Append an event to the run's timeline.

    With `lease_owner`, the same statement checks that this worker still holds the run's lease
    and extends it, so a step's commit is fenced at no extra cost (LeaseLost otherwise).
    """
    batch = Batch()
    run_guard(batch, run_id=run_id, lease_owner=lease_owner)
    event = event_add(batch, run_id=run_id, type=type, payload=payload or {})
    if batch.execute() is None:
        if lease_owner is not None:
            raise LeaseLost(str(run_id))
        raise Run.DoesNotExist(f"Run {run_id} does not exist")
    return event


def messages_add(batch: Batch, *, conversation_id, run_id, messages: list[dict]) -> list[Message]:
    """Append a step's messages (dicts of Message fields) in order, as writes of its batch,
    after its guard: the conversation's counter, bumped under its row lock, hands out their
    orders. The Messages returned are complete once the batch is executed. One write a message
    suits the few a step appends; messages_append takes any number."""
    bump = f'UPDATE "{Conversation._meta.db_table}" SET "message_count" = "message_count" + %s'
    batch.add(
        "counter",
        f'{bump} WHERE "id" = %s AND {{guard}}',
        [len(messages), db_value(Conversation, "id", conversation_id)],
        ("message_count",),
    )
    rows = [Message(conversation_id=conversation_id, run_id=run_id, **fields) for fields in messages]
    for index, row in enumerate(rows):
        later = len(rows) - 1 - index
        row_insert(batch, f"message_{index}", row, exprs={"order": (f"{{counter.message_count}} - {later}", [])})

    def written(results: dict) -> None:
        for index, row in enumerate(rows):
            row.order = results["counter"]["message_count"] - (len(rows) - 1 - index)

    batch.after(written)
    return rows


def messages_append(*, conversation_id, run_id, messages: list[dict]) -> list[Message]:
    """Append messages (dicts of Message fields) in order, in the caller's transaction."""
    with transaction.atomic(savepoint=False):
        last = _bump(Conversation, conversation_id, "message_count", len(messages))
        first = last - len(messages) + 1
        rows = [
            Message(conversation_id=conversation_id, run_id=run_id, order=first + i, **fields)
            for i, fields in enumerate(messages)
        ]
        return Message.objects.bulk_create(rows)


def conversation_create(
    *, agent: Agent, owner=None, title: str = "", metadata: dict | None = None, pk=None, agent_version_id=None
) -> Conversation:
    """A new conversation; `pk` when the caller chose its id already, `agent_version_id` the
    released version it keeps (agents.releases.release_choice)."""
    chosen = {"pk": pk} if pk is not None else {}
    return Conversation.objects.create(
        agent=agent,
        owner=owner,
        title=title[:200],
        metadata=metadata or {},
        agent_version_id=agent_version_id,
        **chosen,
    )
