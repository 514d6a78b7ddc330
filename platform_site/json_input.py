"""JSON from outside (request bodies, form fields that hold JSON): parsed, or refused with a
sentence that says why.

Three things Python's json module accepts and the rest of the stack does not:
- deep nesting: json raises RecursionError somewhere past a thousand levels, and well before
  that jsonschema, serialisation and PostgreSQL's jsonb recurse too; the depth is counted on
  the text before parsing, so nothing recursive ever sees it;
- lone surrogates (`"\\ud800"` escapes that do not form a pair): valid JSON, but not encodable
  as UTF-8, so PostgreSQL and every UTF-8 response refuse them later;
- numbers too large for a float (`1e999` becomes infinity, which is not JSON any more).
"""

import json
import math
import re
from itertools import accumulate

from django.utils.translation import gettext as _

MAX_DEPTH = 64

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
# A surrogate can only come from a \uD800-\uDFFF escape: raw surrogates are not valid UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JSONInputError(ValueError):
    pass


def _too_deep(text: str) -> bool:
    opening = text.count("[") + text.count("{")
    if opening <= MAX_DEPTH:
        return False
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_DEPTH


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONInputError(_("The number %(number)s is too large.") % {"number": text[:40]})
    return value


def _refuse_constant(name: str):
    raise JSONInputError(_("%(name)s is not a JSON value.") % {"name": name})


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def surrogate_path(value, path: str = "") -> str | None:
    """Where the first key or string with a lone surrogate is (`$` is the whole value), or None."""
    if isinstance(value, str):
        return path or "$" if _has_surrogate(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if _has_surrogate(key):
                return path or "$"
            found = surrogate_path(item, f"{path}.{key}" if path else key)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = surrogate_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


def json_loads_checked(data: bytes | str):
    """The value of `data` as JSON, or JSONInputError with a message for the person who sent it."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONInputError(
                _("The JSON is not valid UTF-8 (byte %(position)s).") % {"position": exc.start}
            ) from None
    if _too_deep(data):
        raise JSONInputError(_("The JSON is nested more than %(depth)s levels deep.") % {"depth": MAX_DEPTH})
    try:
        value = json.loads(data, parse_float=_finite, parse_constant=_refuse_constant)
    except JSONInputError:
        raise
    except ValueError as exc:
        raise JSONInputError(_("Not valid JSON: %(error)s") % {"error": exc}) from None
    if _SURROGATE_ESCAPE.search(data):
        where = surrogate_path(value)
        if where:
            raise JSONInputError(
                _(
                    "The JSON holds a lone surrogate escape (\\ud800-\\udfff without its pair) at %(where)s; "
                    "send the character itself or a complete pair."
                )
                % {"where": where}
            )
    return value
