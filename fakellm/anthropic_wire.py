"""Anthropic Messages rendering: plain bodies, SSE events and errors."""

from __future__ import annotations

from fakellm.reply import Reply, Usage
from fakellm.wire_common import ARGS_PIECE, TEXT_PIECE, Meta, dumps, pieces

# Lets one script serve both formats with OpenAI-style overrides.
_STOP_ALIASES = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
MALFORMED_PLAIN = '{"id":"msg_malformed","type":"message","role":"assistant","content":[{'
MALFORMED_STREAM = (
    'event: message_start\ndata: {"type":"message_start","message":{"id":\n\n'
    'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def stop_reason(reply: Reply) -> str:
    if reply.finish_reason:
        return _STOP_ALIASES.get(reply.finish_reason, reply.finish_reason)
    return "tool_use" if reply.tool_calls else "end_turn"


def usage_body(usage: Usage) -> dict:
    # Anthropic counts cache reads and writes separately from (uncached) input tokens.
    return {
        "input_tokens": max(usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens, 0),
        "output_tokens": usage.completion_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
    }


def _blocks(reply: Reply, meta: Meta) -> list[dict]:
    blocks = [{"type": "text", "text": reply.content}] if reply.content else []
    for i, call in enumerate(reply.tool_calls):
        call_id = call.given_id or f"toolu_{meta.short}_{i}"
        blocks.append({"type": "tool_use", "id": call_id, "name": call.name, "input": call.input})
    return blocks


def _envelope(reply: Reply, meta: Meta, content: list, stop: str | None) -> dict:
    body = {
        "id": f"msg_{meta.digest[:24]}",
        "type": "message",
        "role": "assistant",
        "model": meta.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
    }
    if reply.usage is not None:
        body["usage"] = usage_body(reply.usage)
    return body


def completion(reply: Reply, meta: Meta) -> dict:
    return _envelope(reply, meta, _blocks(reply, meta), stop_reason(reply))


def _event(kind: str, payload: dict) -> str:
    return f"event: {kind}\ndata: {dumps({'type': kind, **payload})}\n\n"


def _block_events(index: int, block: dict) -> list[str]:
    if block["type"] == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"], TEXT_PIECE)]
    else:
        start = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(dumps(block["input"]), ARGS_PIECE)]
    events = [_event("content_block_start", {"index": index, "content_block": start})]
    events += [_event("content_block_delta", {"index": index, "delta": d}) for d in deltas]
    events.append(_event("content_block_stop", {"index": index}))
    return events


def stream_events(reply: Reply, meta: Meta) -> tuple[list[str], list[str]]:
    """SSE events split into (body, trailer); a cut stream drops the trailer."""
    start = _envelope(reply, meta, [], None)
    if reply.usage is not None:
        start["usage"]["output_tokens"] = 1  # as the real API reports before generating
    body = [_event("message_start", {"message": start}), _event("ping", {})]
    for index, block in enumerate(_blocks(reply, meta)):
        body += _block_events(index, block)
    delta = {"delta": {"stop_reason": stop_reason(reply), "stop_sequence": None}}
    if reply.usage is not None:
        delta["usage"] = {"output_tokens": reply.usage.completion_tokens}
    return body, [_event("message_delta", delta), _event("message_stop", {})]
