"""Reduce an OpenAI or Anthropic request to the facts a script reacts to.

Scripts are stateless: everything (which scenario, which step, what the tools
returned) is derived from the message history the client sends each time.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Conversation:
    system: str = ""
    last_user_text: str = ""
    # Assistant turns since the last user message: the script's step index.
    step_index: int = 0
    # (tool name, result text) for every tool result after the last user message.
    tool_results: list[tuple[str, str]] = field(default_factory=list)

    @property
    def last_tool_result(self) -> str:
        return self.tool_results[-1][1] if self.tool_results else ""

    @property
    def last_tool_name(self) -> str:
        return self.tool_results[-1][0] if self.tool_results else ""


def text_of(content) -> str:
    """Text of a string content or of the text parts/blocks of a list content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "\n".join(parts)
    return ""


def _dict_messages(body: dict) -> list[dict]:
    return [m for m in body.get("messages") or [] if isinstance(m, dict)]


def _last_index(messages: list[dict], predicate) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if predicate(messages[i]):
            return i
    return -1


def from_openai(body: dict) -> Conversation:
    messages = _dict_messages(body)
    system = "\n".join(text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    last_user = _last_index(messages, lambda m: m.get("role") == "user")
    after = messages[last_user + 1 :]
    names_by_id: dict[str, str] = {}
    pending: list[str] = []
    position = 0
    results = []
    for message in after:
        role = message.get("role")
        if role == "assistant":
            calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
            pending = [str((c.get("function") or {}).get("name", "")) for c in calls]
            names_by_id.update({c["id"]: n for c, n in zip(calls, pending) if c.get("id")})
            position = 0
        elif role == "tool":
            # Some providers omit tool call ids, so fall back to matching by order.
            name = message.get("name") or names_by_id.get(message.get("tool_call_id") or "")
            if not name:
                name = pending[position] if position < len(pending) else ""
            position += 1
            results.append((name, text_of(message.get("content"))))
    return Conversation(
        system=system,
        last_user_text=text_of(messages[last_user].get("content")) if last_user >= 0 else "",
        step_index=sum(1 for m in after if m.get("role") == "assistant"),
        tool_results=results,
    )


def _has_user_text(message: dict) -> bool:
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "text" for b in content)


def from_anthropic(body: dict) -> Conversation:
    messages = _dict_messages(body)
    last_user = _last_index(messages, _has_user_text)
    after = messages[last_user + 1 :]
    names_by_id: dict[str, str] = {}
    results = []
    for message in after:
        blocks = message.get("content")
        if not isinstance(blocks, list):
            continue
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                names_by_id[str(block.get("id"))] = str(block.get("name", ""))
            elif block.get("type") == "tool_result":
                name = names_by_id.get(str(block.get("tool_use_id")), "")
                results.append((name, text_of(block.get("content"))))
    return Conversation(
        system=text_of(body.get("system")),
        last_user_text=text_of(messages[last_user].get("content")) if last_user >= 0 else "",
        step_index=sum(1 for m in after if m.get("role") == "assistant"),
        tool_results=results,
    )
