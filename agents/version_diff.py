"""What changed between two versions of an agent, read from their snapshots, for the diff page:
the system prompt as a line diff, the settings, models and tools as field-by-field changes."""

import difflib
import json
from dataclasses import dataclass, field

from agents.models import AgentVersion
from agents.snapshot import snapshot_parse, snapshot_tools

# Identity columns that differ between versions without meaning a change of behaviour.
_IGNORED_SETTINGS = {"id", "system_prompt"}


@dataclass
class FieldChange:
    name: str
    old: str
    new: str


@dataclass
class ToolChange:
    name: str
    status: str  # "added", "removed" or "changed"
    fields: list[FieldChange] = field(default_factory=list)


@dataclass
class VersionDiff:
    old: AgentVersion
    new: AgentVersion
    prompt_lines: list[tuple[str, str]]  # (kind, line): kind is "add", "del", "hunk" or "same"
    settings: list[FieldChange]
    models: list[FieldChange]
    tools: list[ToolChange]

    @property
    def unchanged(self) -> bool:
        return not (self.prompt_changed or self.settings or self.models or self.tools)

    @property
    def prompt_changed(self) -> bool:
        return any(kind in ("add", "del") for kind, _ in self.prompt_lines)


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1)


def _changes(old: dict | None, new: dict | None, *, prefix: str = "", ignore=frozenset()) -> list[FieldChange]:
    old, new = old or {}, new or {}
    return [
        FieldChange(f"{prefix}{key}", _text(old.get(key)), _text(new.get(key)))
        for key in sorted(set(old) | set(new))
        if key not in ignore and old.get(key) != new.get(key)
    ]


def _prompt_lines(old: str, new: str) -> list[tuple[str, str]]:
    lines = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), "old", "new", n=3, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        kind = {"@": "hunk", "+": "add", "-": "del"}.get(line[:1], "same")
        lines.append((kind, line))
    return lines


def version_diff(*, old: AgentVersion, new: AgentVersion) -> VersionDiff:
    a, b = snapshot_parse(old.snapshot), snapshot_parse(new.snapshot)
    tools_a, tools_b = snapshot_tools(a), snapshot_tools(b)
    tools = []
    for name in sorted(set(tools_a) | set(tools_b)):
        if name not in tools_a:
            tools.append(ToolChange(name, "added", _changes(None, dict(tools_b[name]), ignore={"id"})))
        elif name not in tools_b:
            tools.append(ToolChange(name, "removed"))
        else:
            changed = _changes(dict(tools_a[name]), dict(tools_b[name]), ignore={"id"})
            if changed:
                tools.append(ToolChange(name, "changed", changed))
    return VersionDiff(
        old=old,
        new=new,
        prompt_lines=_prompt_lines(a["agent"]["system_prompt"], b["agent"]["system_prompt"]),
        settings=_changes(dict(a["agent"]), dict(b["agent"]), ignore=_IGNORED_SETTINGS),
        models=_changes(dict(a["model"]), dict(b["model"]), prefix="model.")
        + _changes(
            dict(a["fallback_model"] or {}),
            dict(b["fallback_model"] or {}),
            prefix="fallback_model.",
        ),
        tools=tools,
    )
