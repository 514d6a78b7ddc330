"""The ledger's writes that stand alone: counters, fenced run events, message appends, new
conversations.

These are the record's own writes, shared by every app that changes it. A run's status never
changes here: that is engine.runs (and the engine modules that call it). A step's writes that
commit together are writes of one Batch (conversations.batch: run_guard, event_add,
messages_add, row_insert, row_update, and run_event_append, a batch of its own); `messages_append`
writes alone.
"""

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from agents.models import Agent
from conversations.models import Conversation, Message
from platform_site.prep import prep_save


def _bump(model, pk, field: str, by: int = 1) -> int:
    """Atomically add `by` to a counter column and return the new value, in one statement.

    The row lock it takes is held to the end of the caller's transaction, which is what
    serialises concurrent writers of message orders.
    """
    table = model._meta.db_table
    column = model._meta.get_field(field).column
    key = model._meta.pk.get_db_prep_value(pk, connection)
    pk_column = model._meta.pk.column
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{table}" SET "{column}" = "{column}" + %s WHERE "{pk_column}" = %s RETURNING "{column}"',
            [by, key],
        )
        row = cursor.fetchone()
    if row is None:
        raise model.DoesNotExist(f"{model.__name__} {pk} does not exist")
    return row[0]


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
    with connection.cursor() as cursor:
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
    *,
    agent: Agent,
    owner=None,
    title: str = "",
    metadata: dict | None = None,
    pk=None,
    agent_version_id=None,
    end_user: str = "",
) -> Conversation:
    """A new conversation; `pk` when the caller chose its id already, `agent_version_id` the
    released version it keeps (agents.releases.release_choice), `end_user` the person it serves
    (conversations.end_users; set here only, it never changes)."""
    chosen = {"pk": pk} if pk is not None else {}
    return Conversation.objects.create(
        agent=agent,
        owner=owner,
        title=title[:200],
        metadata=metadata or {},
        agent_version_id=agent_version_id,
        end_user=end_user,
        **chosen,
    )


def conversation_update(*, conversation: Conversation, **changes) -> Conversation:
    """Change a conversation's title or metadata (its agent and end user never change)."""
    unknown = set(changes) - {"title", "metadata"}
    if unknown:
        raise ValueError(f"a conversation's {', '.join(sorted(unknown))} cannot change")
    for name, value in changes.items():
        setattr(conversation, name, value)
    if changes:
        conversation.save(update_fields=list(changes))
    return conversation
