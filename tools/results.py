"""Turning a tool's output into the text the model reads, within the tool's size limit.

Each tool has its own limit (seed 003 §5.2), and a cut result says what it left out, so the
model knows the answer is partial: a list loses whole rows ("… 37 more rows"), anything
else loses characters at the end.
"""

import json
from dataclasses import dataclass


@dataclass
class Rendered:
    text: str
    truncated: bool


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def trim_text(text: str, limit: int) -> Rendered:
    if len(text) <= limit:
        return Rendered(text, False)
    return Rendered(f"{text[:limit]}\n… [{len(text) - limit} more characters omitted]", True)


def _rows_of(value) -> tuple[list | None, callable]:
    """The list to trim by rows, and how to put a shortened list back in its place."""
    if isinstance(value, list):
        return value, lambda rows: rows
    if isinstance(value, dict):
        lists = [(key, item) for key, item in value.items() if isinstance(item, list)]
        if lists:
            key, rows = max(lists, key=lambda pair: len(dumps(pair[1])))
            return rows, lambda kept: {**value, key: kept}
    return None, None


def render(value, limit: int) -> Rendered:
    """Text for the model: strings as they are, structured values as compact JSON."""
    if isinstance(value, str):
        return trim_text(value, limit)
    text = dumps(value)
    if len(text) <= limit:
        return Rendered(text, False)
    rows, rebuild = _rows_of(value)
    if not rows:
        return trim_text(text, limit)
    # Keep as many leading rows as fit, measured on the rebuilt value so the frame counts too.
    frame = len(dumps(rebuild([])))
    budget, kept = limit - frame, 0
    for row in rows:
        size = len(dumps(row)) + (1 if kept else 0)
        if size > budget:
            break
        budget -= size
        kept += 1
    if kept == 0:
        return trim_text(text, limit)
    omitted = len(rows) - kept
    return Rendered(f"{dumps(rebuild(rows[:kept]))}\n… {omitted} more rows (showing {kept} of {len(rows)})", True)
