"""The HTTP half every adapter shares: one POST through the outbound seam, failures sorted
into retryable and permanent ones, and the body handed to the adapter's plain or stream reader.

Every error says what happened and where (HTTP status and the server's message, URL and model
tried, a cut stream with the bytes received, a timeout with its length, a refused connection),
because "could not be reached" for all of them sends an operator looking in the wrong place.
"""

import re
from collections.abc import Callable

import httpx
from httpx_sse import EventSource, SSEError

from agents.providers.base import LLMResponse, ProviderError
from platform_site import outbound
from platform_site.backoff import is_retryable_status, parse_retry_after

# OpenAI and vLLM ("maximum context length is 4096 tokens", code context_length_exceeded),
# llama.cpp ("the request exceeds the available context size"), Anthropic ("prompt is too long").
_CONTEXT_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|exceeds? the (available )?context|context (size|window) "
    r"(exceeded|is too small)|prompt is too long|exceed_context_size",
    re.IGNORECASE,
)
# llama.cpp and some proxies refuse streamed requests with tools ("Cannot use tools with stream",
# "Automatic streaming tool choice is not supported"); the same request unstreamed works.
_STREAM_UNSUPPORTED = re.compile(
    r"stream\w*\b.*\b(not supported|unsupported|not implemented|not available)"
    r"|(cannot|can't|unable to|not supported|unsupported)\b.*\bstream",
    re.IGNORECASE | re.DOTALL,
)


class StreamCut(Exception):
    """A stream reader found the stream ended before the answer was complete."""


class EmptyStream(StreamCut):
    """A stream reader found no part of an answer in the stream at all (at most its end marker)."""


def says_stream_unsupported(text: str) -> bool:
    return bool(_STREAM_UNSUPPORTED.search(text)) and not _CONTEXT_OVERFLOW.search(text)


def request_timeout(model: dict, cap: float | None) -> httpx.Timeout:
    """The model's timeouts, shortened so a call cannot outlive the run's deadline."""
    read = model.get("read_timeout_seconds") or 120
    connect = model.get("connect_timeout_seconds") or 10
    if cap is not None:
        read, connect = min(read, cap), min(connect, cap)
    return httpx.Timeout(max(read, 0.05), connect=max(connect, 0.05))


def _where(url: str, body: dict) -> str:
    return f"{url} (model {body.get('model')!r})"


def http_error(response: httpx.Response, *, url: str, body: dict) -> ProviderError:
    try:
        raw = response.json()
    except ValueError:
        raw = None
    detail, code = None, ""
    if isinstance(raw, dict):
        error = raw.get("error")
        # OpenAI: {"error": {"message": …}}; Anthropic: {"type": "error", "error": {"message": …}}.
        detail = error.get("message") if isinstance(error, dict) else error
        code = " ".join(str(error.get(k) or "") for k in ("code", "type")) if isinstance(error, dict) else ""
    if not detail:
        detail = response.text[:300] or response.reason_phrase
    said = f"{detail} {code}"
    overflow = bool(_CONTEXT_OVERFLOW.search(said))
    unstreamable = bool(body.get("stream")) and says_stream_unsupported(said)
    return ProviderError(
        f"HTTP {response.status_code} from {_where(url, body)}: {detail}",
        # Neither a too-long request nor an unsupported mode succeeds when sent again as it is.
        retryable=is_retryable_status(response.status_code) and not (overflow or unstreamable),
        http_status=response.status_code,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
        raw=raw if isinstance(raw, dict) else None,
        context_overflow=overflow,
        stream_unsupported=unstreamable,
    )


def _stream_tools_refused(response: httpx.Response, *, url: str, body: dict) -> ProviderError:
    """An empty 200 stream answering a streamed request with tools: how llama.cpp refuses to
    stream tool calls, the reason ("Automatic streaming tool choice is not supported") only in its
    own log. Sent again as it is, it is refused again; unstreamed, it is answered."""
    return ProviderError(
        f"The stream from {_where(url, body)} (HTTP {response.status_code}) ended after "
        f"{response.num_bytes_downloaded} bytes without any part of an answer: the server does not stream "
        'answers to requests with tools (llama.cpp logs "Automatic streaming tool choice is not supported"). '
        'Such requests are to be sent unstreamed (the model config\'s "streaming with tools unsupported").',
        retryable=False,
        http_status=response.status_code,
        stream_unsupported=True,
    )


def _timeout_error(
    exc: httpx.TimeoutException, url: str, body: dict, timeout: httpx.Timeout, received: int | None
) -> ProviderError:
    if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
        text = f"Connecting to {_where(url, body)} timed out after {timeout.connect:g} s."
    elif received:
        text = f"The stream from {_where(url, body)} timed out: no data for {timeout.read:g} s after {received} bytes."
    else:
        text = f"The request to {_where(url, body)} timed out after {timeout.read:g} s without an answer."
    return ProviderError(text, retryable=True)


def _transport_error(exc: httpx.TransportError, url: str, body: dict, received: int | None) -> ProviderError:
    if received is not None:
        return ProviderError(
            f"The answer from {_where(url, body)} was cut after {received} bytes: {exc}", retryable=True
        )
    reason = "connection refused" if "refused" in str(exc).lower() else (str(exc) or type(exc).__name__)
    return ProviderError(f"Could not connect to {_where(url, body)}: {reason}.", retryable=True)


def _received(exc: httpx.HTTPError, response: httpx.Response | None) -> int | None:
    """Bytes of the answer that had arrived when it failed; None if none was under way."""
    if response is not None:
        return response.num_bytes_downloaded
    return getattr(exc, "received_bytes", None)


def _plain_answer(response: httpx.Response, *, url: str, body: dict, read_plain) -> LLMResponse:
    """A read response's JSON answer, or the ProviderError it stands for."""
    try:
        data = response.json()
    except ValueError as exc:
        raise ProviderError(
            f"{_where(url, body)} returned a body that is not JSON (cut or malformed) after "
            f"{response.num_bytes_downloaded} bytes.",
            retryable=True,
            http_status=response.status_code,
        ) from exc
    if not isinstance(data, dict):
        raise ProviderError(
            f"{_where(url, body)} returned JSON that is not an object.",
            retryable=True,
            http_status=response.status_code,
        )
    return read_plain(data, response.status_code)


def post(
    *,
    url: str,
    headers: dict,
    body: dict,
    timeout: httpx.Timeout,
    read_plain: Callable[[dict, int], LLMResponse],
    read_stream: Callable[[EventSource, int], LLMResponse],
) -> LLMResponse:
    response = None
    try:
        if not body.get("stream"):
            # Unstreamed: the whole answer is read at once (on a worker, in one wait on its loop).
            response = outbound.send_whole("POST", url, json=body, headers=headers, timeout=timeout)
            if response.status_code >= 400:
                raise http_error(response, url=url, body=body)
            return _plain_answer(response, url=url, body=body, read_plain=read_plain)
        with outbound.get_client().stream("POST", url, json=body, headers=headers, timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                raise http_error(response, url=url, body=body)
            content_type = response.headers.get("content-type", "")
            # Some servers ignore `stream: true` and answer with one JSON body: read it as such.
            if content_type.startswith("text/event-stream"):
                try:
                    return read_stream(EventSource(response), response.status_code)
                except EmptyStream:
                    if body.get("tools"):
                        raise _stream_tools_refused(response, url=url, body=body) from None
                    raise ProviderError(
                        f"The stream from {_where(url, body)} ended after {response.num_bytes_downloaded} bytes "
                        "without any part of an answer.",
                        retryable=True,
                        http_status=response.status_code,
                    ) from None
                except StreamCut:
                    raise ProviderError(
                        f"The stream from {_where(url, body)} was cut after {response.num_bytes_downloaded} bytes, "
                        "before the answer was complete.",
                        retryable=True,
                        http_status=response.status_code,
                    ) from None
            response.read()
            return _plain_answer(response, url=url, body=body, read_plain=read_plain)
    except httpx.TimeoutException as exc:
        raise _timeout_error(exc, url, body, timeout, _received(exc, response)) from exc
    except httpx.TransportError as exc:
        raise _transport_error(exc, url, body, _received(exc, response)) from exc
    except SSEError as exc:
        raise ProviderError(
            f"The stream from {_where(url, body)} is not valid server-sent events: {exc}", retryable=True
        ) from exc
