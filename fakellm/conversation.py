"""Reduce an OpenAI or Anthropic request to the facts a script reacts to.

Scripts are stateless: everything (which scenario, which step, what the tools
returned) is derived from the message history the client sends each time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from fakellm.parts import NO_PARTS, Part, RequestParts

# A first line in square brackets, then the tool's output: a note the client put before the
# result (the engine writes one when a reviewer changed the arguments before approving).
_NOTE = re.compile(r"\[([^\n]*)\]\n")
_DECODER = json.JSONDecoder()
# The engine's memory block (engine/memory.py): a user-role text that opens with this line (and
# ends with the closing one), alone or before the user's own words in one message. It is
# not something the user said, so it is kept apart from the user's text (Conversation.memory).
MEMORY_OPEN = "<user_memory>"
MEMORY_CLOSE = "</user_memory>"


@dataclass(frozen=True)
class ToolResult:
    name: str
    text: str  # as the client sent it
    # The arguments the call ran with: the assistant's, or those a note ending in a JSON
    # object names instead ("… the tool ran with {…}").
    arguments: dict = field(default_factory=dict)

    @property
    def body(self) -> str:
        """The tool's own output: the text past a leading note."""
        return split_note(self.text)[1]


@dataclass(frozen=True)
class OfferedTool:
    name: str
    description: str
    schema: dict


@dataclass(frozen=True)
class ToolChoice:
    mode: str = "auto"  # auto, none, required (any tool) or tool (the named one)
    name: str = ""
    parallel: bool = True


@dataclass(frozen=True)
class Conversation:
    system: str = ""
    last_user_text: str = ""
    # The image, file and audio parts of that message, in order (fakellm/parts.py).
    last_user_parts: tuple[Part, ...] = ()
    # The memory blocks the request shows (user-role texts that open with MEMORY_OPEN).
    memory: str = ""
    # Assistant turns since the last user message: the script's step index.
    step_index: int = 0
    # Every tool result after the last user message.
    tool_results: list[ToolResult] = field(default_factory=list)
    # What the request offers: its tools and how the model may use them.
    tools: list[OfferedTool] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    # Names of the tools the assistant called after the last user message, in order.
    calls_made: list[str] = field(default_factory=list)

    @property
    def last_tool_result(self) -> str:
        return self.tool_results[-1].text if self.tool_results else ""

    @property
    def last_tool_name(self) -> str:
        return self.tool_results[-1].name if self.tool_results else ""

    @property
    def last_user_parts_text(self) -> str:
        """A line per part, each starting with a newline; empty for a text-only message."""
        return "".join(part.line for part in self.last_user_parts)


def split_note(text: str) -> tuple[str, str]:
    """(note, output) of a tool result; the note is empty when there is none."""
    found = _NOTE.match(text)
    if found is None:
        return "", text
    try:
        json.loads(text)
    except ValueError:
        return found.group(1), text[found.end() :]
    return "", text  # a JSON document whose first line happens to be a list


def note_arguments(note: str) -> dict | None:
    """The JSON object a note ends with, if it ends with one."""
    start = note.find("{")
    while start != -1:
        try:
            value, end = _DECODER.raw_decode(note, start)
        except (ValueError, RecursionError):
            value, end = None, -1
        if isinstance(value, dict) and end == len(note):
            return value
        start = note.find("{", start + 1)
    return None


def _ran_with(text: str, asked: dict) -> dict:
    changed = note_arguments(split_note(text)[0])
    return asked if changed is None else changed


def _parsed_arguments(raw) -> dict:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


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


def _is_memory(text: str) -> bool:
    return text.startswith(MEMORY_OPEN)


def _split_memory(text: str) -> tuple[str, str]:
    """(the memory block, the user's own words) of a text the engine opened with the block."""
    if not _is_memory(text):
        return "", text
    block, close, said = text.partition(MEMORY_CLOSE)
    return block + close, said.lstrip("\n")


def _memory_only(content) -> bool:
    text = text_of(content)
    return _is_memory(text) and not _split_memory(text)[1]


def _user_texts(content) -> list[str]:
    if isinstance(content, str):
        return [_split_memory(content)[0] or content]
    return [text_of([part]) for part in content] if isinstance(content, list) else []


def _memory_of(messages: list[dict]) -> str:
    texts = (text for m in messages if m.get("role") == "user" for text in _user_texts(m.get("content")))
    return "\n".join(text for text in texts if _is_memory(text))


def _said(content) -> str:
    """The text of a user message, without the memory block the engine opens it with."""
    if isinstance(content, list):
        content = [part for part in content if not _is_memory(text_of([part]))]
    return _split_memory(content)[1] if isinstance(content, str) else text_of(content)


def _dict_messages(body: dict) -> list[dict]:
    return [m for m in body.get("messages") or [] if isinstance(m, dict)]


def _last_index(messages: list[dict], predicate) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if predicate(messages[i]):
            return i
    return -1


def _openai_tools(body: dict) -> tuple[list[OfferedTool], ToolChoice]:
    tools = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            schema = function.get("parameters")
            description = function.get("description")
            tools.append(
                OfferedTool(
                    function["name"],
                    description if isinstance(description, str) else "",
                    schema if isinstance(schema, dict) else {},
                )
            )
    choice = body.get("tool_choice")
    parallel = body.get("parallel_tool_calls") is not False
    if isinstance(choice, dict):
        function = choice.get("function") if isinstance(choice.get("function"), dict) else {}
        if isinstance(function.get("name"), str):
            return tools, ToolChoice("tool", function["name"], parallel)
        return tools, ToolChoice(parallel=parallel)
    if choice in ("none", "required"):
        return tools, ToolChoice(choice, "", parallel)
    return tools, ToolChoice(parallel=parallel)


def from_openai(body: dict, parts: RequestParts = NO_PARTS) -> Conversation:
    messages = _dict_messages(body)
    system = "\n".join(text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    last_user = _last_index(messages, lambda m: m.get("role") == "user" and not _memory_only(m.get("content")))
    after = messages[last_user + 1 :]
    calls_by_id: dict[str, tuple[str, dict]] = {}
    pending: list[tuple[str, dict]] = []
    made: list[str] = []
    position = 0
    results = []
    for message in after:
        role = message.get("role")
        if role == "assistant":
            calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
            functions = [c.get("function") if isinstance(c.get("function"), dict) else {} for c in calls]
            pending = [(str(f.get("name", "")), _parsed_arguments(f.get("arguments"))) for f in functions]
            calls_by_id.update({c["id"]: p for c, p in zip(calls, pending) if isinstance(c.get("id"), str)})
            made += [name for name, _ in pending]
            position = 0
        elif role == "tool":
            # Some providers omit tool call ids, so fall back to matching by order.
            call = calls_by_id.get(message.get("tool_call_id") or "")
            if call is None:
                call = pending[position] if position < len(pending) else ("", {})
            position += 1
            text = text_of(message.get("content"))
            name = message.get("name") if isinstance(message.get("name"), str) else call[0]
            results.append(ToolResult(name or call[0], text, _ran_with(text, call[1])))
    tools, choice = _openai_tools(body)
    return Conversation(
        system=system,
        last_user_text=_said(messages[last_user].get("content")) if last_user >= 0 else "",
        last_user_parts=parts.by_message.get(last_user, ()),
        memory=_memory_of(messages),
        step_index=sum(1 for m in after if m.get("role") == "assistant"),
        tool_results=results,
        tools=tools,
        tool_choice=choice,
        calls_made=made,
    )


def _has_user_text(message: dict) -> bool:
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    # An image or a document sent alone is the user's turn too.
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") in ("text", "image", "document") for b in content
    )


def _anthropic_tools(body: dict) -> tuple[list[OfferedTool], ToolChoice]:
    tools = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            schema, description = tool.get("input_schema"), tool.get("description")
            tools.append(
                OfferedTool(
                    tool["name"],
                    description if isinstance(description, str) else "",
                    schema if isinstance(schema, dict) else {},
                )
            )
    choice = body.get("tool_choice") if isinstance(body.get("tool_choice"), dict) else {}
    parallel = choice.get("disable_parallel_tool_use") is not True
    kind = choice.get("type")
    if kind == "tool" and isinstance(choice.get("name"), str):
        return tools, ToolChoice("tool", choice["name"], parallel)
    mode = {"none": "none", "any": "required"}.get(kind, "auto")
    return tools, ToolChoice(mode, "", parallel)


def from_anthropic(body: dict, parts: RequestParts = NO_PARTS) -> Conversation:
    messages = _dict_messages(body)
    last_user = _last_index(messages, _has_user_text)
    after = messages[last_user + 1 :]
    calls_by_id: dict[str, tuple[str, dict]] = {}
    made: list[str] = []
    results = []
    for message in after:
        blocks = message.get("content")
        if not isinstance(blocks, list):
            continue
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                name = str(block.get("name", ""))
                calls_by_id[str(block.get("id"))] = (name, _parsed_arguments(block.get("input")))
                made.append(name)
            elif block.get("type") == "tool_result":
                name, asked = calls_by_id.get(str(block.get("tool_use_id")), ("", {}))
                text = text_of(block.get("content"))
                results.append(ToolResult(name, text, _ran_with(text, asked)))
    tools, choice = _anthropic_tools(body)
    return Conversation(
        system=text_of(body.get("system")),
        last_user_text=_said(messages[last_user].get("content")) if last_user >= 0 else "",
        last_user_parts=parts.by_message.get(last_user, ()),
        memory=_memory_of(messages),
        step_index=sum(1 for m in after if m.get("role") == "assistant"),
        tool_results=results,
        tools=tools,
        tool_choice=choice,
        calls_made=made,
    )
