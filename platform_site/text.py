"""Text that PostgreSQL will store.

Its text and JSON columns refuse the NUL character, which a model or a tool can still produce;
one stray byte must not fail a step, so NUL becomes U+FFFD (the replacement character).
"""

import dataclasses


def scrub_nul(value):
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {scrub_nul(k): scrub_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_nul(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: scrub_nul(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value
