"""Statements built through the ORM once per process and shape, then only bound to their values.

A hot statement (a run's claim, the read a posted message starts with) has the same form at
every call; only its values differ. Building it through the ORM each time (a QuerySet, its
filters and expressions, the compiler) cost a worker half a millisecond for the claim's UPDATE,
more than sending it. `bound` builds a statement once per `key`, with stand-in values, finds
where each value lands among the parameters, and from then on puts each call's values there.

The stand-ins are built twice, with two sets of values, and must land in the same places with
the same SQL: a value that the ORM writes into the SQL text, or that changes the statement's
form, is refused (TypeError) instead of being bound wrongly later. Values are text, ids (UUID),
integers and aware times; None and booleans change a statement's form and are not values here.
"""

import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection

Build = Callable[[dict], tuple[str, Sequence]]

_EPOCHS = (datetime(1901, 2, 3, tzinfo=UTC), datetime(1902, 3, 4, tzinfo=UTC))


def _stand_in(round_: int, index: int, value):
    if isinstance(value, bool) or value is None:
        raise TypeError(f"{value!r} changes a statement's form; it cannot be one of its values")
    if isinstance(value, datetime):
        return _EPOCHS[round_] + timedelta(microseconds=index + 1)
    if isinstance(value, uuid.UUID):
        return uuid.UUID(int=((0x5E17 + round_) << 112) + index)
    if isinstance(value, int):
        # Within a 32-bit column's range: the ORM treats an out-of-range integer as matching nothing.
        return 2_000_000_000 + round_ * 1_000 + index
    if isinstance(value, str):
        return f"\x1fstand-in {round_}.{index}\x1f"
    raise TypeError(f"a bound statement takes text, ids, integers and times as values, not {type(value).__name__}")


def _as_parameter(value):
    """`value` as the ORM passes it to this database (the UUID and DateTime fields' preparation)."""
    if isinstance(value, datetime):
        return connection.ops.adapt_datetimefield_value(value)
    if isinstance(value, uuid.UUID) and not connection.features.has_native_uuid_field:
        return value.hex
    return value


@dataclass(frozen=True)
class _Template:
    sql: str
    # For each parameter, the name of the value it takes, or None and the constant it is.
    slots: tuple[tuple[str | None, object], ...]

    def bind(self, values: dict) -> list:
        return [_as_parameter(values[name]) if name else constant for name, constant in self.slots]


def _slots(build: Build, values: dict, round_: int) -> tuple[str, list]:
    stand_ins = {name: _stand_in(round_, index, value) for index, (name, value) in enumerate(values.items())}
    sql, params = build(stand_ins)
    placed = {_as_parameter(stand_in): name for name, stand_in in stand_ins.items()}
    slots = []
    for param in params:
        try:
            slots.append((placed.get(param), param))
        except TypeError:  # unhashable: a constant (a list of statuses, say)
            slots.append((None, param))
    if any(isinstance(stand_in, str) and stand_in in sql for stand_in in stand_ins.values()):
        raise TypeError("a value was written into the statement's text; it cannot be bound later")
    missing = set(values) - {name for name, _ in slots if name}
    if missing:
        raise TypeError(f"the statement does not take {sorted(missing)} as parameters")
    return sql, slots


def _form(slots: list) -> list:
    """Where each value goes, and the constants in between: what both builds must agree on."""
    return [name or ("constant", constant) for name, constant in slots]


def _compile(build: Build, values: dict) -> _Template:
    (sql, slots), (again, other) = _slots(build, values, 0), _slots(build, values, 1)
    if sql != again or _form(slots) != _form(other):
        raise TypeError("the statement's form depends on its values; it cannot be bound")
    return _Template(sql, tuple(slots))


_templates: dict[Hashable, _Template] = {}


def bound(key: Hashable, build: Build, values: dict) -> tuple[str, list]:
    """The SQL and parameters `build(values)` would give, built once per `key` and database.

    `key` names everything the statement's form depends on besides `values` (a flag, a list of
    statuses); `build` takes the values by name and returns the ORM's SQL and parameters."""
    cache_key = (key, connection.vendor)
    template = _templates.get(cache_key)
    if template is None:
        template = _templates[cache_key] = _compile(build, values)
    return template.sql, template.bind(values)
