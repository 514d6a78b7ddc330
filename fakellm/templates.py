"""Placeholder substitution for scripted replies.

A regex is used instead of str.format so that literal JSON braces in content
survive and unknown placeholders are left untouched.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from functools import cached_property

from fakellm.conversation import Conversation

# {name}, {tool:PATH}, {tool@TOOL_NAME:PATH}, {args:PATH} and {args@TOOL_NAME:PATH}; "{"
# followed by a quote (JSON) never matches.
PLACEHOLDER = re.compile(r"\{((?:tool|args)(?:@[^{}:\s]+)?:[^{}\s]*|[^\W\d]\w*)\}")
SYSTEM_DATE = re.compile(r"(\d{4})年(\d{2})月(\d{2})日")


def _chinese_date(day: dt.date) -> str:
    return f"{day.year:04d}年{day.month:02d}月{day.day:02d}日"


def _walk(value, path: str):
    for part in path.split(".") if path else []:
        if isinstance(value, list):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                return None
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def _as_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _parse_json(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


class TemplateContext:
    def __init__(self, conversation: Conversation, groups: dict[str, str | None]):
        self.conversation = conversation
        self.groups = groups
        self._parsed: dict[str, object] = {}

    @cached_property
    def today(self) -> dt.date:
        found = SYSTEM_DATE.search(self.conversation.system)
        if found:
            try:
                return dt.date(*(int(g) for g in found.groups()))
            except ValueError:
                pass
        return dt.date.today()

    def _tool_value(self, key: str) -> str:
        """{tool:…} reads the tool's output (past a note the client put before it) as JSON;
        {args:…} reads the arguments the call ran with."""
        selector, _, path = key.partition(":")
        results = self.conversation.tool_results
        if "@" in selector:
            wanted = selector.split("@", 1)[1]
            results = [r for r in results if r.name == wanted]
        if not results:
            return ""
        if selector.startswith("args"):
            return _as_text(_walk(results[-1].arguments, path))
        text = results[-1].body
        if text not in self._parsed:
            self._parsed[text] = _parse_json(text)
        return _as_text(_walk(self._parsed[text], path))

    def lookup(self, key: str) -> str | None:
        if key in self.groups:
            return self.groups[key] or ""
        if key.startswith(("tool", "args")) and ":" in key:
            return self._tool_value(key)
        if key == "today":
            return _chinese_date(self.today)
        if key == "tomorrow":
            return _chinese_date(self.today + dt.timedelta(days=1))
        if key == "last_tool_result":
            return self.conversation.last_tool_result
        if key == "last_user_message":
            return self.conversation.last_user_text
        if key == "last_user_parts":
            return self.conversation.last_user_parts_text
        return None


def render(text: str, ctx: TemplateContext) -> str:
    if "{" not in text:
        return text

    def substitute(match: re.Match) -> str:
        value = ctx.lookup(match.group(1))
        return match.group(0) if value is None else value

    return PLACEHOLDER.sub(substitute, text)


def render_value(value, ctx: TemplateContext):
    """Render every string inside a JSON-like value, keeping its structure."""
    if isinstance(value, str):
        return render(value, ctx)
    if isinstance(value, list):
        return [render_value(v, ctx) for v in value]
    if isinstance(value, dict):
        return {k: render_value(v, ctx) for k, v in value.items()}
    return value
