"""The tool name a model put in a call, made storable.

Everything in a model's tool call is untrusted: the name may be no string at all, thousands of
characters long, or hold characters PostgreSQL refuses. The stored name always fits the name
columns (no tool's name is longer than ToolDefinition.name allows), and what is wrong with it
becomes a sentence the model can read, never an exception.
"""

import json
import reprlib

from platform_site.text import clipped, scrub_nul

NAME_MAX = 64
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}
# reprlib bounds depth and size, so a deeply nested "name" is shown without recursing into it.
_shown = reprlib.Repr()
_shown.maxstring = _shown.maxother = NAME_MAX


def call_name(call) -> tuple[str, str | None]:
    """(the name to store, why it cannot name a tool or None)."""
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if isinstance(name, str):
        return clipped(scrub_nul(name), NAME_MAX), None
    shown = clipped(scrub_nul(_shown.repr(name)), NAME_MAX)
    kind = _JSON_TYPES.get(type(name), type(name).__name__)
    return shown, f"The tool name must be a string, not {kind} ({shown}). Call a tool by its name."


def call_arguments(call: dict) -> str:
    """The arguments as the model wrote them (providers keep them as text), storable."""
    raw = call["function"].get("arguments") or ""
    return scrub_nul(raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False))
