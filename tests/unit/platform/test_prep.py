"""prep_save returns what Django's get_db_prep_save returns, for every field of the ledger's
models and the values they are written with (platform_site.prep)."""

import datetime
import uuid
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.apps import apps
from django.db import DEFAULT_DB_ALIAS, connections
from django.utils import timezone
from psycopg.types import numeric

from agents.models import ModelConfig
from conversations.models import LLMCall, Message, Run, RunStatus, ToolInvocation
from platform_site.prep import _short_way, prep_save

VALUES = [
    None,
    "",
    "plain text",
    'it\'s 100% "quoted" _like_ %s',
    RunStatus.RUNNING,
    Message.Role.ASSISTANT,
    0,
    7,
    -3,
    2**40,
    True,
    False,
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "12345678123456781234567812345678",
    timezone.now(),
    datetime.datetime(2026, 12, 2, 3, 4, 5, 123456, tzinfo=ZoneInfo("Asia/Shanghai")),
    Decimal("0.000123"),
    {"a": 1},
    [1, "two"],
    1.5,
]


def _comparable(value):
    # psycopg's sized integers compare by their int value and its JSON wrapper not at all: keep
    # the class, and compare a wrapper by what it wraps.
    return (type(value), getattr(value, "obj", value))


def _django(field, value, connection):
    try:
        return ("value", _comparable(field.get_db_prep_save(value, connection)))
    except Exception as exc:  # the same values must fail the same way
        return ("error", type(exc))


def _ours(field, value, connection):
    try:
        return ("value", _comparable(prep_save(field, value, connection)))
    except Exception as exc:
        return ("error", type(exc))


def _ledger_fields():
    for label in ("conversations", "agents", "tools"):
        for model in apps.get_app_config(label).get_models():
            yield from model._meta.concrete_fields


def test_every_ledger_field_and_value_prepares_as_django_prepares_it():
    connection = connections[DEFAULT_DB_ALIAS]
    compared = 0
    for field in _ledger_fields():
        if _short_way(field) is None:
            continue  # Django's own call (an encrypted field's is not even repeatable)
        for value in VALUES:
            assert _ours(field, value, connection) == _django(field, value, connection), (field, value)
            compared += 1
    assert compared > 500


def test_the_short_way_covers_the_hot_fields_and_leaves_the_others_to_django():
    covered = {
        Run._meta.get_field(name)
        for name in ("id", "status", "iterations", "cancel_requested", "lease_expires_at", "conversation", "agent")
    }
    covered |= {LLMCall._meta.get_field("run"), ToolInvocation._meta.get_field("tool_call_id")}
    assert all(_short_way(field) is not None for field in covered)
    assert _short_way(Run._meta.get_field("cost")) is None  # a decimal: Django's way
    assert _short_way(Message._meta.get_field("tool_calls")) is None  # JSON: Django's way
    # A subclass may prepare differently (an encrypted secret): Django's way.
    assert _short_way(ModelConfig._meta.get_field("api_key")) is None


@pytest.mark.skipif(connections[DEFAULT_DB_ALIAS].vendor != "postgresql", reason="psycopg's sized integers")
def test_integers_are_sent_in_their_column_s_size():
    connection = connections[DEFAULT_DB_ALIAS]
    assert type(prep_save(Run._meta.get_field("iterations"), 3, connection)) is numeric.Int4
    assert type(prep_save(Run._meta.get_field("total_tokens"), 3, connection)) in (numeric.Int4, numeric.Int8)


def test_a_naive_datetime_takes_django_s_way():
    connection = connections[DEFAULT_DB_ALIAS]
    field = Run._meta.get_field("finished_at")
    naive = datetime.datetime(2026, 12, 2, 3, 4, 5)
    with pytest.warns(RuntimeWarning):
        ours = prep_save(field, naive, connection)
    with pytest.warns(RuntimeWarning):
        assert ours == field.get_db_prep_save(naive, connection)
