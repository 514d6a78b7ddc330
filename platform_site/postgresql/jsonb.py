"""JSON values sent to PostgreSQL encoded by orjson, where that stores what Django's encoding stores.

Django sends a JSONField's value as `Jsonb(value, dumps=json.dumps)` (or a `partial` of it when
the field has an encoder of its own), and psycopg calls that function for every value. A run
sends about 26 such values (its messages' content, tool calls, events' payloads, usage) and the
standard encoder was about 4 % of a worker's CPU; orjson encodes the same values several times
faster. PostgreSQL parses the text into jsonb, so spacing and escapes (orjson writes compact UTF-8
where json.dumps writes ", " and \\uXXXX) do not change what is stored.

Where the two encoders would store different things, or orjson refuses the value, the standard
encoder is used, so PostgreSQL stores, or refuses, exactly what it did before:
- NaN and ±Infinity: orjson writes them as null, json.dumps as NaN/Infinity, which PostgreSQL
  refuses. An output that holds `null` anywhere is encoded again by json.dumps (a value that
  holds None, or the text "null", takes the slow way too: correct, only slower).
- orjson raises: non-string keys (json.dumps turns them into strings), integers beyond 64 bits,
  lone surrogates.
- a field with its own encoder: its dumps function is not json.dumps, so it is called as before.

orjson also accepts a few types json.dumps refuses (a UUID, a plain Enum member): such a value
would be stored here and raise TypeError on SQLite. With AGENTRY_JSON_STANDARD_CHECK (set by the
test settings) every value also goes through json.dumps, so the suite finds such a value before
an embedded install does.
"""

import json

import orjson
from django.conf import settings
from psycopg.adapt import AdaptersMap
from psycopg.types.json import Jsonb, JsonbBinaryDumper, JsonbDumper, _JsonDumper

# Datetimes and dataclasses go to json.dumps, which refuses them as Django's encoding does.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _encoded(value, checked: bool) -> bytes:
    if checked:
        json.dumps(value)  # raises TypeError where Django's encoding would
    try:
        data = orjson.dumps(value, option=_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value).encode()
    if b"null" in data:
        return json.dumps(value).encode()
    return data


class _Orjson(_JsonDumper):
    """psycopg's JSON dumping with orjson's short way for the values Django encodes with
    json.dumps. Placed after psycopg's Jsonb dumper in the bases, so the binary dumper's own
    dump still adds its version byte around what this returns."""

    def __init__(self, cls, context=None):
        super().__init__(cls, context)
        self.checked = settings.AGENTRY_JSON_STANDARD_CHECK  # read once per cursor

    def dump(self, obj):
        if type(obj) is Jsonb and obj.dumps is json.dumps:
            return _encoded(obj.obj, self.checked)
        return super().dump(obj)


class OrjsonJsonbDumper(JsonbDumper, _Orjson):
    pass


class OrjsonJsonbBinaryDumper(JsonbBinaryDumper, _Orjson):
    pass


def jsonb_dumpers_register(adapters: AdaptersMap) -> None:
    """Use the dumpers above for Jsonb, the text one as psycopg's default is (registered last,
    it is also the AUTO format's, which Django's %s placeholders ask for)."""
    adapters.register_dumper(Jsonb, OrjsonJsonbBinaryDumper)
    adapters.register_dumper(Jsonb, OrjsonJsonbDumper)
