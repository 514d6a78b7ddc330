"""The low-level ledger writes: counters, fenced run events, message appends, new conversations.

These are the record's own writes, shared by every app that changes it. A run's status never
changes here: that is engine.runs (and the engine modules that call it)."""

import json
from functools import partial

from django.db import connection, transaction
from django.utils import timezone

from agents.models import Agent
from conversations.events import WEBHOOK_EVENT_TYPES
from conversations.fencing import LeaseLost, lease_deadline
from conversations.models import Conversation, Message, Run, RunEvent, RunStatus
from conversations.wakeups import publish_run_event
from conversations.webhooks import webhook_deliveries_create


def _bump(model, pk, field: str, by: int = 1) -> int:
    """Atomically add `by` to a counter column and return the new value, in one statement.

    The row lock it takes is held to the end of the caller's transaction, which is what
    serialises concurrent writers of message orders and event sequence numbers.
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


def _event_insert(*, run_id, type: str, payload: dict, lease_owner: str | None) -> RunEvent | None:
    """Next sequence number and the event row; on PostgreSQL in one statement (a data-modifying
    CTE), since every step writes events and each round trip counts at hundreds of runs."""
    now = timezone.now()
    run_pk = Run._meta.pk.get_db_prep_value(run_id, connection)
    fence_set, fence_where, fence_params = "", "", []
    if lease_owner is not None:
        fence_set, fence_where = ', "lease_expires_at" = %s', ' AND "lease_owner" = %s AND "status" = %s'
        fence_params = [lease_deadline(), run_pk, lease_owner, RunStatus.RUNNING]
    else:
        fence_params = [run_pk]
    bump = f'UPDATE "conversations_run" SET "event_seq" = "event_seq" + 1{fence_set} WHERE "id" = %s{fence_where}'
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f'WITH bumped AS ({bump} RETURNING "id", "event_seq") '
                'INSERT INTO "conversations_runevent" ("run_id", "seq", "type", "payload", "created_at") '
                'SELECT "id", "event_seq", %s, %s::jsonb, %s FROM bumped RETURNING "id", "seq"',
                [*fence_params, type, json.dumps(payload), now],
            )
            row = cursor.fetchone()
            if row is None:
                return None
            event = RunEvent(id=row[0], run_id=run_id, seq=row[1], type=type, payload=payload, created_at=now)
            event._state.adding = False
            return event
        cursor.execute(f'{bump} RETURNING "event_seq"', fence_params)
        row = cursor.fetchone()
    if row is None:
        return None
    return RunEvent.objects.create(run_id=run_id, seq=row[0], type=type, payload=payload)


def run_event_append(*, run_id, type: str, payload: dict | None = None, lease_owner: str | None = None) -> RunEvent:
    """Append an event to the run's timeline.

    With `lease_owner`, the same statement checks that this worker still holds the run's lease
    and extends it, so a step's commit is fenced at no extra cost (LeaseLost otherwise).
    """
    with transaction.atomic(savepoint=False):
        event = _event_insert(run_id=run_id, type=type, payload=payload or {}, lease_owner=lease_owner)
        if event is None:
            if lease_owner is not None:
                raise LeaseLost(str(run_id))
            raise Run.DoesNotExist(f"Run {run_id} does not exist")
        if type in WEBHOOK_EVENT_TYPES:
            webhook_deliveries_create(event=event)
        # Streams read rows; the wake-up only tells them to look, once the row is visible.
        transaction.on_commit(partial(publish_run_event, run_id), robust=True)
    return event


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


def conversation_create(*, agent: Agent, owner=None, title: str = "", metadata: dict | None = None) -> Conversation:
    return Conversation.objects.create(agent=agent, owner=owner, title=title[:200], metadata=metadata or {})
