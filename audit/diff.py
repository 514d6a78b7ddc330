"""A change's fields as a person reads them: the field's name, before and after, and for text
over several lines the lines removed and added (a unified diff)."""

import difflib
import json
from dataclasses import dataclass

from django.core.exceptions import FieldDoesNotExist

from audit.models import ConfigChange


@dataclass(frozen=True)
class FieldChange:
    name: str
    before: str
    after: str
    # (kind, text): kind is "-", "+", "@" (a hunk) or " " (context); empty for short values.
    lines: tuple[tuple[str, str], ...]


def _text(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=1 if isinstance(value, dict | list) else None)


def _label(model, name: str) -> str:
    if model is None:
        return name
    try:
        return str(model._meta.get_field(name).verbose_name)
    except FieldDoesNotExist:
        return name


def field_changes(change: ConfigChange) -> list[FieldChange]:
    model = change.content_type.model_class()
    found = []
    for name, (before, after) in change.changes.items():
        old, new = _text(before), _text(after)
        lines: tuple = ()
        if before is not None and after is not None and ("\n" in old or "\n" in new):
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2)
            lines = tuple((line[0], line[1:]) for line in list(diff)[2:])
        found.append(FieldChange(name=_label(model, name), before=old, after=new, lines=lines))
    return found
