"""Anthropic Messages (`POST /v1/messages`) over httpx: Claude, MiniMax (seed 002) and other
servers speaking the format.

Internally messages stay in the OpenAI chat format; this adapter maps them on the way out
(system apart; assistant tool calls → `tool_use` blocks; each run of tool messages → one user
message of `tool_result` blocks, so several calls of one assistant message answer together)
and maps the answer back (text, `tool_use` → tool calls, thinking blocks kept to be sent
again, usage with cache reads counted as cached prompt tokens and writes apart). With prompt
caching on (agents.providers.caching) the stable prefix carries breakpoints.
"""

import json
from collections.abc import Callable

from httpx_sse import EventSource

from agents.providers import transport
from agents.providers.base import LLMResponse, ProviderError, ToolCall, Usage, estimate_prompt_tokens, estimate_tokens
from agents.providers.caching import EPHEMERAL, MEMORY_CHARS, OFF, caching
from agents.providers.media import is_part, ref, text_ref
from tools.arguments import parse_arguments

API_VERSION = "2023-06-01"
# Anthropic requires max_tokens on every request; this is used when the model config has none.
DEFAULT_MAX_TOKENS = 4096
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_RETRYABLE_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
_REASONING_BLOCKS = ("thinking", "redacted_thinking")


def _add(out: list[dict], role: str, blocks: list[dict]) -> None:
    """Anthropic wants user and assistant to alternate: same-role neighbours become one message."""
    if out and out[-1]["role"] == role:
        previous = out[-1]["content"]
        if isinstance(previous, str):
            previous = [{"type": "text", "text": previous}]
        out[-1]["content"] = previous + blocks
    elif role == "user" and len(blocks) == 1 and blocks[0]["type"] == "text":
        out.append({"role": role, "content": blocks[0]["text"]})  # seed 002 sends plain strings
    else:
        out.append({"role": role, "content": list(blocks)})


# What Messages takes as a document's text source (any text file is sent as plain text).
_TEXT_DOCUMENTS = ("text/plain", "text/csv", "text/markdown")


def _part_block(part: dict) -> dict:
    """An attachment's descriptor (attachments.parts) as a content block, its bytes referenced."""
    media_type = part.get("media_type")
    if part["type"] == "image":
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": ref(part)}}
    if part["type"] == "file" and media_type == "application/pdf":
        source = {"type": "base64", "media_type": "application/pdf", "data": ref(part)}
        return {"type": "document", "source": source, "title": part.get("name") or "document"}
    if part["type"] == "file" and media_type in _TEXT_DOCUMENTS:
        source = {"type": "text", "media_type": "text/plain", "data": text_ref(part)}
        return {"type": "document", "source": source, "title": part.get("name") or "document"}
    # Admission refuses such parts for a model that cannot take them; a snapshot that says
    # otherwise cannot be sent.
    raise ProviderError(
        f"Anthropic Messages cannot take the {part['type']} {part.get('name')!r} ({media_type}): "
        "only images, PDF and text documents.",
        retryable=False,
    )


def _user_blocks(content) -> list[dict]:
    if not isinstance(content, list):
        return [{"type": "text", "text": content}]
    blocks = []
    for block in content:
        if is_part(block):
            blocks.append(_part_block(block))
        elif block.get("type") == "text":
            if block.get("text"):
                blocks.append({"type": "text", "text": block["text"]})
        else:
            blocks.append(block)
    return blocks


def _assistant_blocks(message: dict) -> list[dict]:
    blocks = [
        b
        for b in message.get("reasoning") or []
        if b.get("type") in _REASONING_BLOCKS and (b.get("signature") or b.get("data"))
    ]
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        parsed = parse_arguments(function.get("arguments"))
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": parsed.arguments if parsed.arguments is not None else {},
            }
        )
    return blocks


def _memory_blocks(message: dict) -> list[dict]:
    """A user message opening with the end user's memories (caching.MEMORY_CHARS), a breakpoint
    closing them: the same text, cut in two blocks where the memories end."""
    content, length = message["content"], message[MEMORY_CHARS]
    if isinstance(content, str):
        head, rest = content[:length], content[length:]
        blocks = [{"type": "text", "text": head}] + ([{"type": "text", "text": rest}] if rest.strip() else [])
    else:
        blocks = _user_blocks(content)
    if blocks and blocks[0].get("type") == "text" and blocks[0].get("text"):
        blocks[0] = {**blocks[0], "cache_control": EPHEMERAL}
    return blocks


def to_anthropic_messages(messages: list[dict], *, cache: bool = False) -> tuple[str, list[dict]]:
    """(system, messages) in Anthropic's shape from internal OpenAI-style messages; with `cache`,
    a breakpoint after the end user's memories where a message carries them."""
    system: list[str] = []
    out: list[dict] = []
    for message in messages:
        role = message["role"]
        if role == "system":
            if message.get("content"):
                system.append(message["content"])
        elif role == "user":
            if cache and message.get(MEMORY_CHARS) and message.get("content"):
                _add(out, "user", _memory_blocks(message))
            elif message.get("content"):
                _add(out, "user", _user_blocks(message["content"]))
        elif role == "assistant":
            blocks = _assistant_blocks(message)
            if blocks:  # an empty text block is refused; an empty answer carries nothing
                _add(out, "assistant", blocks)
        elif role == "tool":
            _add(
                out,
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message["tool_call_id"],
                        "content": message.get("content") or "",
                    }
                ],
            )
    return "\n\n".join(system), out


def _tool_choice(choice: str, name: str, parallel: bool) -> dict:
    mapped = {
        "auto": {"type": "auto"},
        "none": {"type": "none"},
        "required": {"type": "any"},
        "tool": {"type": "tool", "name": name},
    }[choice]
    if not parallel and choice != "none":
        mapped["disable_parallel_tool_use"] = True
    return mapped


def _close_conversation(messages: list[dict]) -> None:
    """A breakpoint on the last block of the last message, when it is the user's (or tool
    results): the next step, or the conversation's next run, reads the whole history back."""
    if not messages or messages[-1]["role"] != "user":
        return
    last = messages[-1]
    blocks = last["content"]
    if isinstance(blocks, str):
        blocks = [{"type": "text", "text": blocks}]
    if not blocks or (blocks[-1].get("type") == "text" and not blocks[-1].get("text")):
        return  # Anthropic refuses a breakpoint on an empty text block
    if "cache_control" in blocks[-1]:
        return  # the memories' own breakpoint, when they are all the conversation holds
    last["content"] = [*blocks[:-1], {**blocks[-1], "cache_control": EPHEMERAL}]


class AnthropicProvider:
    kind = "anthropic"

    def build_request(
        self,
        *,
        model: dict,
        messages: list[dict],
        tools: list[dict],
        tool_choice: str,
        parallel_tool_calls: bool,
        tool_name: str = "",
        cache_key: str = "",
    ) -> dict:
        # Breakpoints (caching.MAX_BREAKPOINTS at most): the last tool, the system prompt, the
        # end user's memories, the conversation's last message. The key is OpenAI's alone.
        cache = caching(model) != OFF
        system, wire = to_anthropic_messages(messages, cache=cache)
        if cache:
            _close_conversation(wire)
        body = {"model": model["model"], "max_tokens": model.get("max_tokens") or DEFAULT_MAX_TOKENS}
        if system:
            body["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}] if cache else system
        body["messages"] = wire
        for name in ("temperature", "top_p"):
            if model.get(name) is not None:
                body[name] = model[name]
        if model.get("stop"):
            body["stop_sequences"] = model["stop"]
        if model.get("thinking") == "enabled":
            body["thinking"] = {"type": "enabled", "budget_tokens": model["thinking_budget_tokens"]}
        elif model.get("thinking") == "disabled":
            body["thinking"] = {"type": "disabled"}
        if tools:
            body["tools"] = [
                {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in tools
            ]
            if cache:
                body["tools"][-1]["cache_control"] = EPHEMERAL
            body["tool_choice"] = _tool_choice(tool_choice, tool_name, parallel_tool_calls)
        if model.get("stream"):
            body["stream"] = True
        body.update(model.get("extra_params") or {})
        return body

    def send(
        self,
        *,
        model: dict,
        api_key: str,
        body: dict,
        on_delta: Callable[[str], None] | None = None,
        timeout_cap: float | None = None,
    ) -> LLMResponse:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return transport.post(
            url=model["base_url"].rstrip("/") + "/messages",
            headers=headers,
            body=body,
            timeout=transport.request_timeout(model, timeout_cap),
            read_plain=lambda data, status: _parse_message(data, body, status),
            read_stream=lambda events, status: _read_stream(events, body, on_delta, status),
        )

    def estimate_usage(self, *, body: dict, response: LLMResponse) -> Usage:
        return _estimate(body, response.content, response.tool_calls)


def _system_text(system) -> str:
    """The system prompt's text, sent as a string or (with a breakpoint) as text blocks."""
    return system if isinstance(system, str) else "".join(block.get("text") or "" for block in system)


def _estimate(body: dict, content: str, calls: list[ToolCall]) -> Usage:
    system = [{"content": _system_text(body["system"])}] if body.get("system") else []
    prompt = estimate_prompt_tokens(
        messages=system + body.get("messages", []), tools=body.get("tools", []), provider=AnthropicProvider.kind
    )
    completion = estimate_tokens(content + "".join(c.arguments for c in calls))
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion, estimated=True)


def _usage(data: dict | None, body: dict, content: str, calls: list[ToolCall]) -> Usage:
    if not data or data.get("input_tokens") is None:
        return _estimate(body, content, calls)
    # Anthropic counts cache reads and cache writes apart from the (uncached) input tokens: the
    # prompt is their sum.
    cache_read = int(data.get("cache_read_input_tokens") or 0)
    cache_write = int(data.get("cache_creation_input_tokens") or 0)
    prompt = int(data.get("input_tokens") or 0) + cache_read + cache_write
    completion = int(data.get("output_tokens") or 0)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=0,
        total_tokens=prompt + completion,
    )


def _finish(stop_reason: str | None, calls: list[ToolCall]) -> str:
    if not stop_reason:
        return "tool_calls" if calls else "stop"
    return _FINISH.get(stop_reason, stop_reason)


def _response(blocks: list[dict], stop_reason, usage_data, body, raw, status) -> LLMResponse:
    text = "".join(b.get("text") or "" for b in blocks if b.get("type") == "text")
    calls = [
        ToolCall(b.get("id") or "", b.get("name") or "", b["arguments"]) for b in blocks if b.get("type") == "tool_use"
    ]
    reasoning = [b for b in blocks if b.get("type") in _REASONING_BLOCKS] or None
    return LLMResponse(
        text, calls, _finish(stop_reason, calls), _usage(usage_data, body, text, calls), raw, status, reasoning
    )


def _parse_message(data: dict, body: dict, status: int) -> LLMResponse:
    if data.get("type") == "error":
        raise _stream_error(data)
    if not isinstance(data.get("content"), list):
        raise ProviderError("Model response has no content blocks.", retryable=True, http_status=status, raw=data)
    blocks = []
    for block in data["content"]:
        if isinstance(block, dict):
            if block.get("type") == "tool_use":
                block = {**block, "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}
            blocks.append(block)
    return _response(blocks, data.get("stop_reason"), data.get("usage"), body, data, status)


def _stream_error(data: dict) -> ProviderError:
    error = data.get("error") or {}
    said = str(error.get("message") or error)
    # Some servers refuse a streamed request with tools inside a 200 stream rather than with a status.
    unstreamable = transport.says_stream_unsupported(said)
    return ProviderError(
        f"Model stream reported an error: {said}",
        raw=data,
        stream_unsupported=unstreamable,
        retryable=error.get("type") in _RETRYABLE_ERRORS and not unstreamable,
    )


def _read_stream(events: EventSource, body: dict, on_delta, status: int) -> LLMResponse:
    blocks: dict[int, dict] = {}
    fragments: dict[int, list[str]] = {}
    usage: dict = {}
    stop_reason, done, model_name, seen = None, False, None, False
    for event in events.iter_sse():
        if not event.data.strip():
            continue
        try:
            data = json.loads(event.data)
        except ValueError as exc:
            raise ProviderError("Model stream carried an event that is not JSON.", retryable=True) from exc
        seen = True
        kind = data.get("type") or event.event
        if kind == "message_start":
            message = data.get("message") or {}
            usage.update(message.get("usage") or {})
            model_name = message.get("model")
        elif kind == "content_block_start":
            blocks[data["index"]] = dict(data.get("content_block") or {})
            fragments[data["index"]] = []
        elif kind == "content_block_delta":
            _apply_delta(
                blocks.setdefault(data["index"], {"type": "text", "text": ""}),
                fragments.setdefault(data["index"], []),
                data.get("delta") or {},
                on_delta,
            )
        elif kind == "message_delta":
            stop_reason = (data.get("delta") or {}).get("stop_reason") or stop_reason
            usage.update(data.get("usage") or {})
        elif kind == "message_stop":
            done = True
            break
        elif kind == "error":
            raise _stream_error(data)
    if not seen:
        # Not one event: how llama.cpp answers a streamed request with tools it cannot stream.
        raise transport.EmptyStream()
    if not done:
        raise transport.StreamCut()
    ordered = []
    for index in sorted(blocks):
        block = blocks[index]
        if block.get("type") == "tool_use":
            # The input arrives as partial JSON strings; some servers send it whole in the start.
            joined = "".join(fragments[index])
            block["arguments"] = joined if joined else json.dumps(block.get("input") or {}, ensure_ascii=False)
        ordered.append(block)
    raw = {
        "streamed": True,
        "model": model_name,
        "content": ordered,
        "stop_reason": stop_reason,
        "usage": usage or None,
    }
    return _response(ordered, stop_reason, usage, body, raw, status)


def _apply_delta(block: dict, fragments: list[str], delta: dict, on_delta) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = (block.get("text") or "") + delta.get("text", "")
        if on_delta and delta.get("text"):
            on_delta(delta["text"])
    elif kind == "input_json_delta":
        fragments.append(delta.get("partial_json") or "")
    elif kind == "thinking_delta":
        block["thinking"] = (block.get("thinking") or "") + delta.get("thinking", "")
    elif kind == "signature_delta":
        block["signature"] = delta.get("signature", "")
