"""Text that PostgreSQL will store.

Its text and JSON columns refuse the NUL character, and (being UTF-8) lone surrogates, which a
model can still produce (a `\\ud83d` escape without its pair is valid JSON); one stray character
must not fail a step, so each becomes U+FFFD (the replacement character).
"""

import dataclasses
import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_nul(value):
    """The value with NUL and lone surrogates replaced, in strings, keys and dataclass fields."""
    if isinstance(value, str):
        return value if value.isascii() and "\x00" not in value else _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub_nul(k): scrub_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_nul(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value, **{f.name: scrub_nul(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        )
    return value


def has_lone_surrogate(value) -> bool:
    """Whether a JSON value holds a lone surrogate anywhere (keys too): broken text, not a character."""
    if isinstance(value, str):
        return not value.isascii() and _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_lone_surrogate(v) for v in value)
    return False


def clipped(text: str, limit: int) -> str:
    """At most `limit` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
