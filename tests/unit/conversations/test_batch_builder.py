"""The statement builder of conversations.batch: writes said in model terms (fields, values,
conditions) become the SQL and parameters a batch runs, without a database."""

import datetime
import uuid
from decimal import Decimal

import pytest
from django.db import DEFAULT_DB_ALIAS, connections

from agents.models import ModelConfig
from conversations.batch import (
    Batch,
    Is,
    Plus,
    Ref,
    Row,
    Select,
    Update,
    count,
    either,
    exists,
    rendered,
    run_guard,
)
from conversations.models import LLMCall, Run, RunStatus, ToolInvocation, Webhook
from platform_site.prep import prep_save
from tools.models import ToolDefinition

RUN_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
NOW = datetime.datetime(2026, 12, 6, 3, 4, 5, tzinfo=datetime.UTC)


def _prepared(model, name: str, value):
    return prep_save(model._meta.get_field(name), value, connections[DEFAULT_DB_ALIAS])


def test_an_update_as_the_guard_matches_on_its_own_and_as_a_later_write_only_with_the_guard():
    update = Update(LLMCall).set(status=LLMCall.Status.FAILED, finished_at=NOW).where(run_id=RUN_ID)
    sql, params = update.render(guarded=False)
    assert sql == 'UPDATE "conversations_llmcall" SET "status" = %s, "finished_at" = %s WHERE "run_id" = %s'
    assert params == [LLMCall.Status.FAILED, _prepared(LLMCall, "finished_at", NOW), RUN_ID]
    sql, _ = update.render(guarded=True)
    assert sql.endswith('WHERE "run_id" = %s AND {guard}')
    sql, params = Update(LLMCall).set(error="x").render(guarded=True)
    assert sql == 'UPDATE "conversations_llmcall" SET "error" = %s WHERE {guard}' and params == ["x"]


def test_values_are_prepared_for_their_field_and_none_is_null():
    sql, params = (
        Update(Run).set(iterations=3, lease_owner="", lease_expires_at=None, cost=Decimal("0.5")).render(guarded=False)
    )
    assert sql == (
        'UPDATE "conversations_run" SET "iterations" = %s, "lease_owner" = %s, "lease_expires_at" = NULL, "cost" = %s'
    )
    assert params == [
        _prepared(Run, "iterations", 3),
        "",
        _prepared(Run, "cost", Decimal("0.5")),
    ]
    # A foreign key is named by its field or its column's attribute, and takes the target's value.
    by_field, _ = Update(LLMCall).set(error="").where(run=RUN_ID).render(guarded=False)
    by_attribute, _ = Update(LLMCall).set(error="").where(run_id=RUN_ID).render(guarded=False)
    assert by_field == by_attribute


def test_increments_add_to_the_column_a_value_or_a_batch_reference():
    update = Update(ModelConfig).add(calibration_calls=1, prompt_tokens_reported=40).where(id=7)
    sql, params = update.render(guarded=True)
    assert sql == (
        'UPDATE "agents_modelconfig" SET "calibration_calls" = "calibration_calls" + %s, '
        '"prompt_tokens_reported" = "prompt_tokens_reported" + %s WHERE "id" = %s AND {guard}'
    )
    assert params == [1, 40, 7]
    sql, params = Update(Run).set(event_seq=Plus(Ref("events"))).render(guarded=False)
    assert sql == 'UPDATE "conversations_run" SET "event_seq" = "event_seq" + {events}' and params == []
    sql, _ = Update(Run).set(event_seq=Row("event_seq")).render(guarded=False)
    assert sql == 'UPDATE "conversations_run" SET "event_seq" = "event_seq"'


def test_conditions_compare_test_booleans_and_nulls():
    update = Update(ToolInvocation).set(status=ToolInvocation.Status.ERROR)
    waiting = (ToolInvocation.Status.PENDING, ToolInvocation.Status.AWAITING_APPROVAL)
    sql, params = update.where(run_id=RUN_ID, status__in=waiting, id__ne=9, position__lt=2).render(guarded=False)
    assert sql.endswith('WHERE "run_id" = %s AND "status" IN (%s, %s) AND "id" <> %s AND "position" < %s')
    assert params == [ToolInvocation.Status.ERROR, RUN_ID, *waiting, 9, 2]
    sql, params = (
        Update(Run)
        .set(error="")
        .where(cancel_requested=False, usage_estimated=True, parent_run=None)
        .render(guarded=False)
    )
    assert sql.endswith('WHERE NOT "cancel_requested" AND "usage_estimated" AND "parent_run_id" IS NULL')
    assert params == [""]
    sql, _ = Update(Run).set(error="").where(Is("parent_run_id", None, "<>")).render(guarded=False)
    assert sql.endswith('WHERE "parent_run_id" IS NOT NULL')
    with pytest.raises(ValueError):
        Update(Run).set(error="").where(status__in=()).render(guarded=False)
    with pytest.raises(ValueError):
        Update(Run).where(id=RUN_ID).render(guarded=False)


def test_a_subquery_is_aliased_and_row_correlates_it_with_the_written_row():
    hooked = exists(
        Webhook,
        Is("agent_id", Row("agent_id")),
        either(Is("conversation_id", None), Is("conversation_id", Row("conversation_id"))),
        is_active=True,
    )
    sql, params = Update(Run).set(status=RunStatus.COMPLETED).where(~hooked).render(guarded=False)
    assert sql.endswith(
        'WHERE NOT EXISTS (SELECT 1 FROM "conversations_webhook" w WHERE w."agent_id" = "conversations_run"."agent_id" '
        'AND (w."conversation_id" IS NULL OR w."conversation_id" = "conversations_run"."conversation_id") '
        'AND w."is_active")'
    )
    assert params == [RunStatus.COMPLETED]
    # The negation is a new condition; the one it came from stays as it was.
    assert (~hooked).negated and not hooked.negated and ~~hooked == hooked
    recorded = exists(ToolInvocation, run_id=Row("id"), tool_call_id="call_1")
    sql, params = Update(Run).set(error="").where(id=RUN_ID).where(recorded).render(guarded=False)
    assert sql.endswith(
        'WHERE "id" = %s AND EXISTS (SELECT 1 FROM "conversations_toolinvocation" t '
        'WHERE t."run_id" = "conversations_run"."id" AND t."tool_call_id" = %s)'
    )
    assert params == ["", RUN_ID, "call_1"]


def test_a_count_and_a_reference_are_values_of_an_insert():
    sql, params = rendered(LLMCall, "attempt", count(LLMCall, plus=1, run_id=RUN_ID, iteration=2))
    assert sql == ('(SELECT COUNT(*) + 1 FROM "conversations_llmcall" l WHERE l."run_id" = %s AND l."iteration" = %s)')
    assert params == [RUN_ID, _prepared(LLMCall, "iteration", 2)]
    assert rendered(LLMCall, "attempt", Ref("counter.message_count", -2)) == ("{counter.message_count} - 2", [])
    assert rendered(LLMCall, "attempt", Ref("counter.message_count", 1)) == ("{counter.message_count} + 1", [])
    assert rendered(LLMCall, "attempt", Ref("events")) == ("{events}", [])
    assert rendered(LLMCall, "attempt", 4) == ("%s", [_prepared(LLMCall, "attempt", 4)])


def test_the_builder_is_immutable():
    base = Update(Run).set(error="")
    narrowed = base.where(id=RUN_ID)
    assert base.conditions == () and narrowed.conditions == (Is("id", RUN_ID),)
    with pytest.raises(AttributeError):
        base.model = LLMCall


def test_a_select_reads_the_columns_of_its_fields():
    select = Select(ToolDefinition, ("is_active",)).where(id=3)
    assert select.render() == ('SELECT "is_active" FROM "tools_tooldefinition" WHERE "id" = %s', [3])
    assert select.columns == ("is_active",)
    assert Select(LLMCall, ("run",)).columns == ("run_id",)


def test_a_batch_takes_updates_and_renders_the_guard_without_its_guard_reference():
    batch = Batch()
    batch.add("run", Update(Run).set(iterations=Plus(1)).where(id=RUN_ID), returning=("id",))
    batch.add("call", Update(LLMCall).set(error="x").where(id=5))
    batch.read("tool", Select(ToolDefinition, ("is_active",)).where(id=3))
    guard, call, tool = batch._writes
    assert "{guard}" not in guard.sql and call.sql.endswith("AND {guard}")
    assert (tool.returning, tool.params) == (("is_active",), [3])
    with pytest.raises(ValueError):
        batch.add("other", Update(LLMCall).set(error="y"), [1])


def test_the_run_guard_fences_extends_the_lease_and_takes_typed_assignments_and_conditions():
    batch = Batch()
    run_guard(
        batch,
        run_id=RUN_ID,
        lease_owner="w1",
        sets={"iterations": Plus(1), "usage_estimated": True},
        where=(Is("cancel_requested", False),),
        returning=("status",),
    )
    [guard] = batch._writes
    assert guard.sql == (
        'UPDATE "conversations_run" SET "event_seq" = "event_seq" + {events}, "lease_expires_at" = %s, '
        '"iterations" = "iterations" + %s, "usage_estimated" = %s '
        'WHERE "id" = %s AND "lease_owner" = %s AND "status" = %s AND NOT "cancel_requested"'
    )
    assert guard.params[1:] == [1, True, RUN_ID, "w1", RunStatus.RUNNING]
    assert guard.returning == ("id", "event_seq", "status")
    quiet = Batch()
    run_guard(quiet, run_id=RUN_ID, lease_owner=None, event=False)
    assert quiet._writes[0].sql == 'UPDATE "conversations_run" SET "event_seq" = "event_seq" WHERE "id" = %s'
