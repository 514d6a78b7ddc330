"""Values as the database takes them, for the ledger's raw statements.

`field.get_db_prep_save(value, connection)` is the ORM's way, and for the plain values the
ledger writes it returns the value itself, or what the backend's adapter makes of it: a string
for a text column, an aware datetime, a UUID, an integer wrapped in the size psycopg should
send. It gets there through a chain of calls (prep, to_python, the empty-value checks) and looks
the connection up through Django's per-thread proxy several times per value; a run's step writes
some two hundred values, and that chain was about a tenth of its worker CPU. `prep_save` takes
the short way for exactly those fields and values, with the backend's own adapter, and Django's
way for everything else (another field class, a subclass that may change the prep, a value of
another type), so it always returns what get_db_prep_save returns.
"""

import datetime
import uuid

from django.conf import settings
from django.db import models

_TEXT = {models.CharField, models.TextField, models.SlugField}
_INTEGER = {
    models.IntegerField,
    models.SmallIntegerField,
    models.BigIntegerField,
    models.PositiveIntegerField,
    models.PositiveSmallIntegerField,
    models.PositiveBigIntegerField,
}
_AUTO = {models.AutoField, models.SmallAutoField, models.BigAutoField}

# Returned by a short way that does not know the value: the caller takes Django's way.
_LONG_WAY = object()


def _text(value, connection):
    # CharField.to_python returns any str as it is (a choice too), and there is no adapter.
    return value if isinstance(value, str) else _LONG_WAY


def _boolean(value, connection):
    return value if type(value) is bool else _LONG_WAY


def _uuid(value, connection):
    if type(value) is not uuid.UUID:
        return _LONG_WAY
    return value if connection.features.has_native_uuid_field else value.hex


def _datetime(value, connection):
    # A naive datetime under USE_TZ gets Django's warning and conversion: the long way.
    if type(value) is not datetime.datetime or (value.tzinfo is None and settings.USE_TZ):
        return _LONG_WAY
    return connection.ops.adapt_datetimefield_value(value)


def _integer(internal_type: str):
    def prep(value, connection):
        # int(value) is the value itself only for an exact int (not a bool, not a choice).
        if type(value) is not int:
            return _LONG_WAY
        return connection.ops.adapt_integerfield_value(value, internal_type)

    return prep


def _auto(value, connection):
    return connection.ops.validate_autopk_value(value) if type(value) is int else _LONG_WAY


def _short_way(field):
    kind = type(field)
    if kind in _TEXT:
        return _text
    if kind is models.BooleanField:
        return _boolean
    if kind is models.UUIDField:
        return _uuid
    if kind is models.DateTimeField:
        return _datetime
    if kind in _INTEGER:
        return _integer(field.get_internal_type())
    if kind in _AUTO:
        return _auto
    if kind in (models.ForeignKey, models.OneToOneField):
        # ForeignKey.get_db_prep_save: None stays None (prep_save's own first check), "" becomes
        # None (the long way), anything else is its target's value.
        return _short_way(field.target_field)
    return None


_short_ways: dict = {}


def prep_save(field, value, connection):
    """`field.get_db_prep_save(value, connection)`, the short way where there is one.
    `connection` is a backend's wrapper (connections[alias]), not django.db.connection's proxy."""
    try:
        short = _short_ways[field]
    except KeyError:
        short = _short_ways[field] = _short_way(field)
    if short is not None:
        if value is None:
            return None  # every field with a short way, a key too, sends None as it is
        prepared = short(value, connection)
        if prepared is not _LONG_WAY:
            return prepared
    return field.get_db_prep_save(value, connection)
