"""OpenAI Chat Completions over httpx: OpenAI, Doubao/Ark, DeepSeek, Qwen, Moonshot, vLLM, Ollama…

The internal message format already is this wire format, so requests need little mapping; the
work is in reading the many dialects of the response (seed 000's Doubao puts `stop_reason`
in the choice and sends tool calls without ids) and of streamed deltas.
"""

import json
from collections.abc import Callable

from httpx_sse import EventSource

from agents.providers import transport
from agents.providers.base import LLMResponse, ProviderError, ToolCall, Usage, estimate_prompt_tokens, estimate_tokens
from agents.providers.caching import MEMORY_CHARS, sends_cache_key
from agents.providers.media import data_url_ref, is_part, ref

# Finish reasons some compatible servers spell their own way, in the OpenAI vocabulary: an answer
# cut off at its output limit is `length` whoever says so (the engine must not deliver it as whole).
_FINISH = {"max_tokens": "length", "model_length": "length"}
_SAMPLING = ("temperature", "top_p", "max_tokens", "frequency_penalty", "presence_penalty", "seed", "reasoning_effort")


# The audio formats Chat Completions' input_audio takes, by media type.
_AUDIO_FORMATS = {"audio/wav": "wav", "audio/mpeg": "mp3"}


def _wire_part(part: dict) -> dict:
    """An attachment's descriptor (attachments.parts) as a content part, its bytes referenced."""
    if part["type"] == "image":
        return {"type": "image_url", "image_url": {"url": data_url_ref(part)}}
    if part["type"] == "audio":
        audio_format = _AUDIO_FORMATS.get(part.get("media_type"))
        if audio_format is None:
            raise ProviderError(
                f"The audio {part.get('name')!r} is {part.get('media_type')}: Chat Completions takes WAV or MP3 only.",
                retryable=False,
            )
        return {"type": "input_audio", "input_audio": {"data": ref(part), "format": audio_format}}
    return {"type": "file", "file": {"filename": part.get("name") or "file", "file_data": data_url_ref(part)}}


def _wire_message(message: dict) -> dict:
    if MEMORY_CHARS in message:
        # Where the memories end matters to Anthropic's breakpoints only.
        message = {k: v for k, v in message.items() if k != MEMORY_CHARS}
    content = message.get("content")
    if not isinstance(content, list):
        return message
    return {**message, "content": [_wire_part(block) if is_part(block) else block for block in content]}


def _tool_choice(choice: str, name: str):
    if choice == "tool":
        return {"type": "function", "function": {"name": name}}
    return choice


def _response_format(model: dict) -> dict | None:
    fmt = model.get("response_format") or "text"
    if fmt == "json_object":
        return {"type": "json_object"}
    if fmt == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "answer", "schema": model["response_schema"]}}
    return None


class OpenAICompatibleProvider:
    kind = "openai_compatible"

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
        if any("reasoning" in m for m in messages):
            # Thinking blocks kept for Anthropic are not part of this format.
            messages = [{k: v for k, v in m.items() if k != "reasoning"} for m in messages]
        body = {"model": model["model"], "messages": [_wire_message(m) for m in messages]}
        for name in _SAMPLING:
            if model.get(name) not in (None, ""):
                body[name] = model[name]
        if model.get("stop"):
            body["stop"] = model["stop"]
        response_format = _response_format(model)
        if response_format:
            body["response_format"] = response_format
        if model.get("thinking"):
            # Ark/Doubao (seed 000's thinking_type), DeepSeek and GLM spell it this way.
            body["thinking"] = {"type": model["thinking"]}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]},
                }
                for t in tools
            ]
            body["tool_choice"] = _tool_choice(tool_choice, tool_name)
            if not parallel_tool_calls:
                body["parallel_tool_calls"] = False
        if model.get("stream"):
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if cache_key and sends_cache_key(model):
            body["prompt_cache_key"] = cache_key
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
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return transport.post(
            url=model["base_url"].rstrip("/") + "/chat/completions",
            headers=headers,
            body=body,
            timeout=transport.request_timeout(model, timeout_cap),
            read_plain=lambda data, status: _parse_completion(data, body, status),
            read_stream=lambda events, status: _read_stream(events, body, on_delta, status),
        )

    def estimate_usage(self, *, body: dict, response: LLMResponse) -> Usage:
        return _estimate(body, response.content, response.tool_calls)


def _estimate(body: dict, content: str, tool_calls: list[ToolCall]) -> Usage:
    prompt = estimate_prompt_tokens(
        messages=body.get("messages", []), tools=body.get("tools", []), provider=OpenAICompatibleProvider.kind
    )
    completion = estimate_tokens(content + "".join(c.arguments for c in tool_calls))
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion, estimated=True)


def _usage(data: dict | None, body: dict, content: str, tool_calls: list[ToolCall]) -> Usage:
    if not data:
        return _estimate(body, content, tool_calls)
    prompt = int(data.get("prompt_tokens") or 0)
    completion = int(data.get("completion_tokens") or 0)
    # OpenAI and Doubao nest the details; DeepSeek and Moonshot report cache hits at the top.
    cached = (data.get("prompt_tokens_details") or {}).get("cached_tokens")
    cached = cached or data.get("prompt_cache_hit_tokens") or data.get("cached_tokens")
    # OpenAI's audio models count an audio input's tokens apart (images are not reported apart).
    audio = (data.get("prompt_tokens_details") or {}).get("audio_tokens")
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=int(cached or 0),
        reasoning_tokens=int((data.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0),
        audio_tokens=int(audio or 0),
        total_tokens=int(data.get("total_tokens") or prompt + completion),
    )


def _tool_calls(items: list[dict]) -> list[ToolCall]:
    calls = []
    for item in items or []:
        function = item.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments or {}, ensure_ascii=False)
        calls.append(ToolCall(id=item.get("id") or "", name=function.get("name") or "", arguments=arguments))
    return calls


def _parse_completion(data: dict, body: dict, status: int) -> LLMResponse:
    choices = data.get("choices")
    if not choices:
        raise ProviderError("Model response has no choices.", retryable=True, http_status=status, raw=data)
    choice = choices[0]
    message = choice.get("message") or {}
    content = message.get("content") or ""
    calls = _tool_calls(message.get("tool_calls"))
    finish = choice.get("finish_reason") or choice.get("stop_reason") or ("tool_calls" if calls else "stop")
    return LLMResponse(
        content, calls, _FINISH.get(finish, finish), _usage(data.get("usage"), body, content, calls), data, status
    )


def _read_stream(events: EventSource, body: dict, on_delta, status: int) -> LLMResponse:
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[dict] = []
    finish, usage, done, last = "", None, False, {}
    for event in events.iter_sse():
        if event.data.strip() == "[DONE]":
            done = True
            break
        if not event.data.strip():
            continue
        try:
            chunk = json.loads(event.data)
        except ValueError as exc:
            raise ProviderError("Model stream carried a chunk that is not JSON.", retryable=True) from exc
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error"):
            # Some servers refuse a streamed request with tools inside a 200 stream rather than with a status.
            unstreamable = transport.says_stream_unsupported(json.dumps(chunk["error"], ensure_ascii=False))
            raise ProviderError(
                f"Model stream reported an error: {chunk['error']}",
                retryable=not unstreamable,
                raw=chunk,
                stream_unsupported=unstreamable,
            )
        last = chunk
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
                if on_delta:
                    on_delta(delta["content"])
            if delta.get("reasoning_content"):
                reasoning.append(delta["reasoning_content"])
            for position, part in enumerate(delta.get("tool_calls") or []):
                _merge_tool_delta(calls, part, position)
            finish = choice.get("finish_reason") or choice.get("stop_reason") or finish
    if not last and (not done or body.get("tools")):
        # Not one chunk: llama.cpp's answer to a streamed request with tools it cannot stream.
        raise transport.EmptyStream()
    if not done and not finish:
        raise transport.StreamCut()
    tool_calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in calls]
    text = "".join(content)
    raw = {
        "streamed": True,
        "content": text,
        "tool_calls": [c.__dict__ for c in tool_calls],
        "finish_reason": finish,
        "usage": usage,
        "model": last.get("model"),
    }
    if reasoning:
        raw["reasoning_content"] = "".join(reasoning)
    finish = finish or ("tool_calls" if tool_calls else "stop")
    return LLMResponse(
        text, tool_calls, _FINISH.get(finish, finish), _usage(usage, body, text, tool_calls), raw, status
    )


MAX_INDEX_GAP = 64


def _merge_tool_delta(calls: list[dict], part: dict, position: int) -> None:
    """Servers differ: most send id and name once, then argument fragments, keyed by `index`;
    some repeat id and name in every delta; some send the arguments in one piece; some omit
    `index`, where a new id (or a second entry in one delta) starts a new call. Repeats must
    not be appended twice."""
    if not isinstance(part, dict):
        return
    function = part.get("function") if isinstance(part.get("function"), dict) else {}
    part_id = part.get("id") if isinstance(part.get("id"), str) else ""
    index = part.get("index")
    # An index is the server's word, not a size to allocate: one far past the calls seen so far
    # (or negative) is read like a missing one rather than growing the list to match it.
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(calls) + MAX_INDEX_GAP:
        last = calls[-1] if calls else None
        starts_new = last is None or position > 0 or bool(part_id and last["id"] and part_id != last["id"])
        index = len(calls) if starts_new else len(calls) - 1
    while len(calls) <= index:
        calls.append({"id": "", "name": "", "arguments": ""})
    call = calls[index]
    if part_id and not call["id"]:
        call["id"] = part_id
    name = function.get("name")
    if name is not None and not isinstance(name, str):
        name = json.dumps(name, ensure_ascii=False)  # the engine then refuses it as an unknown tool
    if name and name != call["name"]:
        # A repeat that grew replaces the name; anything else is the next fragment of it.
        call["name"] = name if name.startswith(call["name"]) else call["name"] + name
    arguments = function.get("arguments")
    if arguments:
        call["arguments"] += arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
