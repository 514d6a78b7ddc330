"""JSON values for PostgreSQL are encoded by orjson only where that gives what json.dumps gives
(platform_site.postgresql.jsonb); what PostgreSQL then stores is in
tests/platform/test_jsonb_dumpers.py."""

import json
import uuid
from datetime import UTC, datetime
from enum import Enum

import pytest

from platform_site.postgresql.jsonb import _encoded


class Plain(Enum):
    X = 1


@pytest.mark.parametrize(
    "value",
    [{"x": float("nan")}, [float("inf")], {1: "a"}, 2**70, "\ud800", {"v": None}, {"t": "null"}],
)
def test_the_standard_encoder_is_used_wherever_orjson_would_differ_or_refuses(value):
    assert _encoded(value, checked=False) == json.dumps(value).encode()


def test_orjson_encodes_the_values_it_stores_the_same():
    value = {"text": "成都", "n": [1, 2.5, True]}
    assert _encoded(value, checked=False) == '{"text":"成都","n":[1,2.5,true]}'.encode()


@pytest.mark.parametrize("value", [uuid.uuid4(), Plain.X, datetime(2026, 1, 1, tzinfo=UTC)])
def test_types_the_standard_encoder_refuses_are_refused_when_checked(value):
    with pytest.raises(TypeError):
        _encoded({"v": value}, checked=True)
