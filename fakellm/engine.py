"""The request pipeline shared by both wire formats: pick, fault, wait, render."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from fakellm import anthropic_wire, openai_wire
from fakellm.anthropic_parts import anthropic_parts
from fakellm.conversation import from_anthropic, from_openai
from fakellm.generic import generic_step
from fakellm.memory import extraction_step
from fakellm.openai_parts import openai_parts
from fakellm.parts import NO_PARTS, PartError, RequestParts, carries_parts
from fakellm.reply import build_reply
from fakellm.state import ServerState
from fakellm.templates import TemplateContext
from fakellm.tokens import prompt_tokens, text_counter
from fakellm.wire_common import Meta, dumps, status_message

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Wire:
    parts: Callable
    conversation: Callable
    completion: Callable
    stream_events: Callable
    error_body: Callable
    malformed_plain: str
    malformed_stream: str


OPENAI = Wire(
    openai_parts,
    from_openai,
    openai_wire.completion,
    openai_wire.stream_events,
    openai_wire.error_body,
    openai_wire.MALFORMED_PLAIN,
    openai_wire.MALFORMED_STREAM,
)
ANTHROPIC = Wire(
    anthropic_parts,
    from_anthropic,
    anthropic_wire.completion,
    anthropic_wire.stream_events,
    anthropic_wire.error_body,
    anthropic_wire.MALFORMED_PLAIN,
    anthropic_wire.MALFORMED_STREAM,
)
SSE = "text/event-stream"


def error_response(wire: Wire, status: int, message: str, retry_after=None, code=None, param=None):
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else None
    return JSONResponse(wire.error_body(status, message, code, param), status_code=status, headers=headers)


def _digest(messages: list) -> str:
    canonical = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _refusal(wire: Wire, settings: dict, body: dict, parts: RequestParts) -> Response | None:
    """What a small self-hosted server refuses: a streamed request with tools, when it cannot
    stream tool calls; a request larger than its context window."""
    refusal = settings["stream_tools_error"]
    if refusal and body.get("stream") is True and body.get("tools"):
        status = refusal.get("status", 500)
        if refusal.get("empty"):
            # A 200 stream that ends with nothing in it, the reason only in the server's log, as
            # llama.cpp answers ("Automatic streaming tool choice is not supported").
            log.warning("streamed request with tools refused: %s", refusal["message"])
            return StreamingResponse(iter(()), media_type=SSE)
        if refusal.get("in_stream"):
            # Refused after the stream began: a 200 whose only event is the error.
            error = dumps({**wire.error_body(status, refusal["message"]), "type": "error"})
            return Response(f"event: error\ndata: {error}\n\n", media_type=SSE)
        return error_response(wire, status, refusal["message"])
    window = settings["context_window"]
    if not window:
        return None
    prompt = prompt_tokens(body, settings["token_counting"], settings["token_scale"], parts)
    wanted = body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else 0
    if prompt + wanted <= window:
        return None
    return JSONResponse(overflow_body(wire, settings["context_error"], window, prompt, wanted), status_code=400)


def overflow_body(wire: Wire, style: str, window: int, prompt: int, wanted: int) -> dict:
    if wire is ANTHROPIC:
        return anthropic_wire.error_body(400, f"prompt is too long: {prompt + wanted} tokens > {window} maximum")
    if style == "llamacpp":
        return {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": window,
            }
        }
    message = (
        f"This model's maximum context length is {window} tokens. However, you requested {prompt + wanted} "
        f"tokens ({prompt} in the messages, {wanted} in the completion). Please reduce the length of the "
        "messages or completion."
    )
    return openai_wire.error_body(400, message, "context_length_exceeded")


def _cached(state: ServerState, wire: Wire, body: dict, reply, defaults: dict):
    """The reply with the cached tokens the request's prefix earns (fakellm.prompt_cache)."""
    count, minimum = text_counter(defaults["token_counting"], defaults["token_scale"]), defaults["cache_min_tokens"]
    if wire is ANTHROPIC:
        return state.prompt_cache.anthropic(body, reply, count, minimum)
    return state.prompt_cache.openai(body, reply, count, minimum, defaults["cache_step_tokens"])


# A STAMP in scripted text leaves the server as STAMP + the emission time in microseconds,
# so a benchmark can measure how long streamed text takes to reach a client downstream.
STAMP = "\u231a"


async def _emit(events: list[str], delay_s: float):
    for i, event in enumerate(events):
        if delay_s and i:
            await asyncio.sleep(delay_s)
        if STAMP in event:
            event = event.replace(STAMP, f"{STAMP}{time.time_ns() // 1000}")
        yield event


async def handle(request: Request, wire: Wire) -> Response:
    state: ServerState = request.app.state.fakellm
    try:
        body = json.loads(await request.body())
    except ValueError:
        return error_response(wire, 400, "Request body is not valid JSON.")
    if not isinstance(body, dict):
        return error_response(wire, 400, "Request body must be a JSON object.")
    state.requests.append(body)
    if not isinstance(body.get("messages"), list):
        return error_response(wire, 400, "'messages' is required and must be a list.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return error_response(wire, 400, "'model' is required.")
    script = state.scripts.get(model)
    if script is None:
        message = f"The model `{model}` does not exist or you do not have access to it."
        return error_response(wire, 404, message, code="model_not_found")

    parts = NO_PARTS
    if carries_parts(body):
        try:
            # Decoding an image takes a few milliseconds: off the event loop.
            parts = await asyncio.to_thread(wire.parts, body)
        except PartError as exc:
            return error_response(wire, exc.status, exc.message, code=exc.code, param=exc.param)
    refused = _refusal(wire, script.defaults, body, parts)
    if refused is not None:
        return refused

    conversation = wire.conversation(body, parts)
    step, groups = script.pick(conversation)
    if "generic" in step:
        step = generic_step(step, conversation)
    elif "extract_memory" in step:
        step = extraction_step(step, conversation)
    digest = _digest(body["messages"])
    fault = script.draw_chaos()
    if fault is None and "fault" in step:
        if state.scripted_fault_fires(model, digest, step["fault"]):
            fault = step["fault"]
    fault = fault or {}

    latency_ms = step.get("latency_ms", script.defaults["latency_ms"])
    if latency_ms:
        await asyncio.sleep(latency_ms / 1000)
    hold_timeout_ms = script.defaults["hold_timeout_ms"]
    if "hold" in step and not await state.hold(step["hold"]).wait(hold_timeout_ms / 1000):
        log.warning("hold %r was not released within %s ms; answering", step["hold"], hold_timeout_ms)
    if "status" in fault:
        status = fault["status"]
        return error_response(wire, status, status_message(status), fault.get("retry_after"))
    kind = fault.get("kind")
    if kind == "timeout":
        # The client is expected to give up first; answering afterwards is harmless.
        await asyncio.sleep(fault.get("timeout_ms", script.faults["timeout_ms"]) / 1000)
    stream = body.get("stream") is True
    if kind == "malformed_json":
        if stream:
            return Response(wire.malformed_stream, media_type=SSE)
        return Response(wire.malformed_plain, media_type="application/json")

    counting, scale = script.defaults["token_counting"], script.defaults["token_scale"]
    reply = build_reply(
        step,
        TemplateContext(conversation, groups),
        lambda: prompt_tokens(body, counting, scale, parts),
        text_counter(counting, scale),
        parts.audio_tokens if parts.present else None,
    )
    if "cached_tokens" not in (step.get("usage") or {}):
        reply = _cached(state, wire, body, reply, script.defaults)
    meta = Meta(model, int(time.time()), digest, script.defaults)
    if stream:
        events, trailer = wire.stream_events(reply, meta)
        events = events[: max(1, len(events) // 2)] if kind == "cut_stream" else events + trailer
        delay_s = script.defaults["stream_chunk_delay_ms"] / 1000
        return StreamingResponse(_emit(events, delay_s), media_type=SSE, headers={"cache-control": "no-cache"})
    text = dumps(wire.completion(reply, meta))
    if kind == "cut_stream":
        text = text[: len(text) // 2]
    return Response(text, media_type="application/json")
