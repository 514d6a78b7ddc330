"""OpenAI Chat Completions rendering: plain bodies, SSE chunks and errors."""

from __future__ import annotations

from fakellm.reply import Reply, ToolCall, Usage
from fakellm.wire_common import ARGS_PIECE, TEXT_PIECE, Meta, dumps, pieces

# Lets one script serve both formats with Anthropic-style overrides.
_FINISH_ALIASES = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
MALFORMED_PLAIN = '{"id":"chatcmpl-malformed","object":"chat.completion","choices":[{"index":0,'
MALFORMED_STREAM = 'data: {"id":"chatcmpl-malformed","choices":[{"delta":{"content":"\n\ndata: [DONE]\n\n'


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    if status == 429:
        kind, code = "rate_limit_error", code or "rate_limit_exceeded"
    elif status >= 500:
        kind = "server_error"
    else:
        kind = "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def finish_reason(reply: Reply) -> str:
    if reply.finish_reason:
        return _FINISH_ALIASES.get(reply.finish_reason, reply.finish_reason)
    return "tool_calls" if reply.tool_calls else "stop"


def _finish_fields(meta: Meta, value: str | None) -> dict:
    field = meta.settings["finish_field"]
    names = ("finish_reason", "stop_reason") if field == "both" else (field,)
    return {name: value for name in names}


def _identity(call: ToolCall, index: int, meta: Meta) -> dict:
    if call.given_id or not meta.settings["omit_tool_call_ids"]:
        return {"id": call.given_id or f"call_{meta.short}_{index}", "type": "function"}
    return {"type": "function"}


def usage_body(usage: Usage) -> dict:
    details = {"cached_tokens": usage.cached_tokens}
    if usage.audio_tokens is not None:
        details["audio_tokens"] = usage.audio_tokens
    return {
        "completion_tokens": usage.completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "prompt_tokens": usage.prompt_tokens,
        "prompt_tokens_details": details,
        "total_tokens": usage.total_tokens,
    }


def completion(reply: Reply, meta: Meta) -> dict:
    message = {"content": reply.content, "role": "assistant"}
    if reply.tool_calls:
        message["tool_calls"] = [
            {**_identity(call, i, meta), "function": {"arguments": call.arguments, "name": call.name}}
            for i, call in enumerate(reply.tool_calls)
        ]
    body = {
        "id": f"chatcmpl-{meta.digest[:24]}",
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{"index": 0, "message": message, **_finish_fields(meta, finish_reason(reply))}],
    }
    if reply.usage is not None:
        body["usage"] = usage_body(reply.usage)
    return body


def _tool_deltas(call: ToolCall, index: int, meta: Meta) -> list[dict]:
    head = {"index": index, **_identity(call, index, meta)}
    style = meta.settings["stream_style"]
    if style == "single_chunk_args":
        return [{**head, "function": {"name": call.name, "arguments": call.arguments}}]
    fragments = pieces(call.arguments, ARGS_PIECE)
    if style == "repeat_id_name":
        return [{**head, "function": {"name": call.name, "arguments": f}} for f in fragments or [""]]
    first = {**head, "function": {"name": call.name, "arguments": ""}}
    return [first] + [{"index": index, "function": {"arguments": f}} for f in fragments]


def stream_events(reply: Reply, meta: Meta) -> tuple[list[str], list[str]]:
    """SSE events split into (body, trailer); a cut stream drops the trailer."""
    with_usage = meta.settings["stream_usage"] and reply.usage is not None
    base = {
        "id": f"chatcmpl-{meta.digest[:24]}",
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
    }

    def chunk(delta: dict, finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, **_finish_fields(meta, finish)}
        extra = {"usage": None} if with_usage else {}
        return f"data: {dumps({**base, 'choices': [choice], **extra})}\n\n"

    body = [chunk({"role": "assistant", "content": ""})]
    body += [chunk({"content": piece}) for piece in pieces(reply.content, TEXT_PIECE)]
    for i, call in enumerate(reply.tool_calls):
        body += [chunk({"tool_calls": [delta]}) for delta in _tool_deltas(call, i, meta)]
    trailer = [chunk({}, finish_reason(reply))]
    if with_usage:
        final = {**base, "choices": [], "usage": usage_body(reply.usage)}
        trailer.append(f"data: {dumps(final)}\n\n")
    trailer.append("data: [DONE]\n\n")
    return body, trailer
