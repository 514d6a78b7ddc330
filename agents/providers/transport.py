"""The HTTP half every adapter shares: one POST through the outbound seam, failures sorted
into retryable and permanent ones, and the body handed to the adapter's plain or stream reader.
"""

from typing import Callable

import httpx
from httpx_sse import EventSource, SSEError

from agents.providers.base import LLMResponse, ProviderError, is_retryable_status, parse_retry_after
from platform_site import outbound


def request_timeout(model: dict, cap: float | None) -> httpx.Timeout:
    """The model's timeouts, shortened so a call cannot outlive the run's deadline."""
    read = model.get("read_timeout_seconds") or 120
    connect = model.get("connect_timeout_seconds") or 10
    if cap is not None:
        read, connect = min(read, cap), min(connect, cap)
    return httpx.Timeout(max(read, 0.05), connect=max(connect, 0.05))


def http_error(response: httpx.Response) -> ProviderError:
    try:
        raw = response.json()
    except ValueError:
        raw = None
    detail = None
    if isinstance(raw, dict):
        error = raw.get("error")
        # OpenAI: {"error": {"message": …}}; Anthropic: {"type": "error", "error": {"message": …}}.
        detail = error.get("message") if isinstance(error, dict) else error
    if not detail:
        detail = response.text[:300] or response.reason_phrase
    return ProviderError(
        f"Model endpoint answered HTTP {response.status_code}: {detail}",
        retryable=is_retryable_status(response.status_code),
        http_status=response.status_code,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
        raw=raw if isinstance(raw, dict) else None,
    )


def post(*, url: str, headers: dict, body: dict, timeout: httpx.Timeout,
         read_plain: Callable[[dict, int], LLMResponse],
         read_stream: Callable[[EventSource, int], LLMResponse]) -> LLMResponse:
    client = outbound.get_client()
    try:
        with client.stream("POST", url, json=body, headers=headers, timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                raise http_error(response)
            content_type = response.headers.get("content-type", "")
            # Some servers ignore `stream: true` and answer with one JSON body: read it as such.
            if body.get("stream") and content_type.startswith("text/event-stream"):
                return read_stream(EventSource(response), response.status_code)
            response.read()
            try:
                data = response.json()
            except ValueError as exc:
                raise ProviderError("Model returned a body that is not JSON (cut or malformed).", retryable=True,
                                    http_status=response.status_code) from exc
            if not isinstance(data, dict):
                raise ProviderError("Model returned JSON that is not an object.", retryable=True,
                                    http_status=response.status_code)
            return read_plain(data, response.status_code)
    except httpx.TimeoutException as exc:
        raise ProviderError(f"Model call timed out ({type(exc).__name__}).", retryable=True) from exc
    except httpx.TransportError as exc:
        raise ProviderError(f"Model call failed to connect or was cut: {exc}", retryable=True) from exc
    except SSEError as exc:
        raise ProviderError(f"Model stream is not valid server-sent events: {exc}", retryable=True) from exc


def stream_cut() -> ProviderError:
    return ProviderError("Model stream ended before the answer was complete.", retryable=True)
