"""JSON values go to PostgreSQL encoded by orjson where that stores what json.dumps stores
(platform_site.postgresql.jsonb): for every kind of value, what PostgreSQL stores, or refuses, is
the same either way."""

import json
import uuid

import pytest
from django.db import DataError, connection, transaction
from psycopg.adapt import PyFormat
from psycopg.types.json import Jsonb, JsonbBinaryDumper, JsonbDumper

from conversations.models import Message, RunStatus
from platform_site.postgresql import jsonb
from platform_site.postgresql.jsonb import OrjsonJsonbBinaryDumper, OrjsonJsonbDumper, _encoded

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="psycopg's adapters")


VALUES = {
    "chinese": {"text": "我在成都，明天天气如何？", "n": 3},
    "escapes": {"q": 'say "hi"\\ \n\t\r\b\f /', "ctrl": "\x01\x1f\x7f"},
    "line separators": "a\u2028b\u2029c",
    "emoji": ["🙂", "𝄞"],
    "floats": [0.1, 1e16, 1.5e-300, -0.0, 3.0, 1e308],
    "integers": [0, -1, 2**63 - 1, -(2**63)],
    "big integer": {"n": 2**70},
    "non-string keys": {1: "a", 2.5: "b", False: "c", None: "d"},
    "nested": {"a": [{"b": [None, True, False, {"c": []}]}], "d": {}},
    "none inside": {"value": None, "text": "null"},
    "nan": {"x": float("nan")},
    "infinity": [float("inf")],
    "minus infinity": [float("-inf")],
    "lone surrogate": {"s": "\ud800"},
    "nul": {"s": "a\x00b"},
    "choices": {"status": RunStatus.QUEUED, "role": Message.Role.TOOL},
    "tuple": (1, "two", (3,)),
    "scalar string": "only text",
    "scalar number": 42,
    "scalar none": None,
}


def _stored(value, dumps):
    """What PostgreSQL stores for the value sent as Django sends it, or the error's class."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT %s::jsonb::text", [Jsonb(value, dumps=dumps)])
            return cursor.fetchone()[0]
    except (DataError, ValueError, TypeError) as exc:
        return type(exc).__name__


def _standard(value):
    return json.dumps(value)


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(VALUES))
def test_postgresql_stores_or_refuses_the_same_as_with_the_standard_encoder(name):
    value = VALUES[name]
    # json.dumps itself takes our dumper's short way; a function of our own takes psycopg's.
    assert _stored(value, json.dumps) == _stored(value, _standard)


@pytest.mark.django_db
def test_nan_is_still_refused_and_not_stored_as_null():
    assert _stored({"x": float("nan")}, json.dumps) == "DataError"


@pytest.mark.django_db
def test_the_suite_checks_every_value_with_the_standard_encoder():
    # The test settings turn the check on, so a UUID in a JSON value fails here as on SQLite.
    assert _stored({"id": uuid.uuid4()}, json.dumps) == "TypeError"
    assert _stored({"id": uuid.uuid4()}, _standard) == "TypeError"


@pytest.mark.django_db
def test_a_connection_sends_jsonb_with_these_dumpers_text_as_the_default():
    connection.ensure_connection()
    adapters = connection.connection.adapters
    assert adapters.get_dumper(Jsonb, PyFormat.TEXT) is OrjsonJsonbDumper
    assert adapters.get_dumper(Jsonb, PyFormat.BINARY) is OrjsonJsonbBinaryDumper
    assert adapters.get_dumper(Jsonb, PyFormat.AUTO) is OrjsonJsonbDumper
    assert issubclass(OrjsonJsonbDumper, JsonbDumper) and issubclass(OrjsonJsonbBinaryDumper, JsonbBinaryDumper)


@pytest.mark.django_db
def test_the_binary_dumper_stores_the_same():
    dumper = OrjsonJsonbBinaryDumper(Jsonb)
    value = VALUES["chinese"]
    assert dumper.dump(Jsonb(value, dumps=json.dumps)) == b"\x01" + _encoded(value, checked=False)
    assert bytes(JsonbBinaryDumper(Jsonb).dump(Jsonb(value, dumps=_standard)))[:1] == b"\x01"


@pytest.mark.django_db
def test_a_json_field_round_trips_through_the_orm(monkeypatch, django_user_model):
    from conversations.models import Conversation
    from tests.support.factories import make_agent

    counted = _counted(jsonb._encoded)
    monkeypatch.setattr(jsonb, "_encoded", counted)
    owner = django_user_model.objects.create_user("json-owner")
    metadata = {"k": ["值", 1.5, {"n": None}], "status": RunStatus.RUNNING}
    conversation = Conversation.objects.create(agent=make_agent(), owner=owner, metadata=metadata)
    assert counted.calls
    conversation.refresh_from_db()
    assert conversation.metadata == {"k": ["值", 1.5, {"n": None}], "status": "running"}


def _counted(function):
    def counted(*args, **kwargs):
        counted.calls += 1
        return function(*args, **kwargs)

    counted.calls = 0
    return counted
