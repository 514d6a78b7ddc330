"""OpenAI Chat Completions over httpx: OpenAI, Doubao/Ark, DeepSeek, Qwen, Moonshot, vLLM, Ollama…

The internal message format already is this wire format, so requests need no mapping; the
work is in reading the many dialects of the response (seed 000's Doubao puts `stop_reason`
in the choice and sends tool calls without ids) and of streamed deltas.
"""

import json
from typing import Callable

import httpx

from agents.providers.base import (
    LLMResponse,
    ProviderError,
    ToolCall,
    Usage,
    estimate_tokens,
    is_retryable_status,
    parse_retry_after,
)
from platform_site import outbound

_SAMPLING = ("temperature", "top_p", "max_tokens", "frequency_penalty", "presence_penalty")


class OpenAICompatibleProvider:
    kind = "openai_compatible"

    def build_request(self, *, model: dict, messages: list[dict], tools: list[dict],
                      tool_choice: str, parallel_tool_calls: bool) -> dict:
        body = {"model": model["model"], "messages": messages}
        for name in _SAMPLING:
            if model.get(name) is not None:
                body[name] = model[name]
        if tools:
            body["tools"] = [
                {"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}}
                for t in tools
            ]
            body["tool_choice"] = tool_choice
            if not parallel_tool_calls:
                body["parallel_tool_calls"] = False
        if model.get("stream"):
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(model.get("extra_params") or {})
        return body

    def send(self, *, model: dict, api_key: str, body: dict,
             on_delta: Callable[[str], None] | None = None) -> LLMResponse:
        url = model["base_url"].rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx.Timeout(model.get("read_timeout_seconds", 120), connect=model.get("connect_timeout_seconds", 10))
        client = outbound.get_client()
        try:
            if body.get("stream"):
                with client.stream("POST", url, json=body, headers=headers, timeout=timeout) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise _http_error(response)
                    return _read_stream(response, body, on_delta)
            response = client.post(url, json=body, headers=headers, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise ProviderError(f"Model call timed out ({type(exc).__name__}).", retryable=True) from exc
        except httpx.TransportError as exc:
            raise ProviderError(f"Model call failed to connect or was cut: {exc}", retryable=True) from exc
        if response.status_code >= 400:
            raise _http_error(response)
        try:
            data = response.json()
        except ValueError as exc:
            raise ProviderError("Model returned a body that is not JSON.", retryable=True,
                                http_status=response.status_code) from exc
        return _parse_completion(data, body, response.status_code)


def _http_error(response: httpx.Response) -> ProviderError:
    try:
        raw = response.json()
        detail = (raw.get("error") or {}).get("message") if isinstance(raw.get("error"), dict) else raw.get("error")
    except ValueError:
        raw, detail = None, response.text[:300]
    return ProviderError(
        f"Model endpoint answered HTTP {response.status_code}: {detail or response.reason_phrase}",
        retryable=is_retryable_status(response.status_code),
        http_status=response.status_code,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
        raw=raw if isinstance(raw, dict) else None,
    )


def _usage(data: dict | None, body: dict, content: str, tool_calls: list[ToolCall]) -> Usage:
    if not data:
        prompt = estimate_tokens(body.get("messages", [])) + estimate_tokens(body.get("tools", []))
        completion = estimate_tokens(content + "".join(c.arguments for c in tool_calls))
        return Usage(prompt, completion, 0, 0, prompt + completion, estimated=True)
    prompt = int(data.get("prompt_tokens") or 0)
    completion = int(data.get("completion_tokens") or 0)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=int((data.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
        reasoning_tokens=int((data.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0),
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
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices:
        raise ProviderError("Model response has no choices.", retryable=True, http_status=status, raw=data)
    choice = choices[0]
    message = choice.get("message") or {}
    content = message.get("content") or ""
    calls = _tool_calls(message.get("tool_calls"))
    finish = choice.get("finish_reason") or choice.get("stop_reason") or ("tool_calls" if calls else "stop")
    return LLMResponse(content, calls, finish, _usage(data.get("usage"), body, content, calls), data, status)


def _read_stream(response: httpx.Response, body: dict, on_delta) -> LLMResponse:
    content: list[str] = []
    calls: dict[int, dict] = {}
    finish, usage, done, last = "", None, False, {}
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(payload)
        except ValueError as exc:
            raise ProviderError("Model stream carried a chunk that is not JSON.", retryable=True) from exc
        last = chunk
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
                if on_delta:
                    on_delta(delta["content"])
            for position, part in enumerate(delta.get("tool_calls") or []):
                _merge_tool_delta(calls, part, position)
            finish = choice.get("finish_reason") or choice.get("stop_reason") or finish
    if not done and not finish:
        raise ProviderError("Model stream ended before the answer was complete.", retryable=True)
    tool_calls = [ToolCall(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    text = "".join(content)
    raw = {"streamed": True, "content": text, "tool_calls": [c.__dict__ for c in tool_calls],
           "finish_reason": finish, "usage": usage, "model": last.get("model")}
    finish = finish or ("tool_calls" if tool_calls else "stop")
    return LLMResponse(text, tool_calls, finish, _usage(usage, body, text, tool_calls), raw, response.status_code)


def _merge_tool_delta(calls: dict[int, dict], part: dict, position: int) -> None:
    """Servers differ: most send id and name once then argument fragments; some repeat id and
    name in every delta; some omit `index`. Repeats must not be appended twice."""
    index = part.get("index", position)
    function = part.get("function") or {}
    call = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
    if part.get("id") and not call["id"]:
        call["id"] = part["id"]
    name = function.get("name")
    if name and not call["name"]:
        call["name"] = name
    elif name and name != call["name"] and not name.startswith(call["name"]):
        call["name"] += name
    arguments = function.get("arguments")
    if arguments:
        call["arguments"] += arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
