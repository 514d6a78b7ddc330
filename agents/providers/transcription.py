"""Speech to text on an OpenAI-compatible server: `POST {base_url}/audio/transcriptions` with the
clip as a multipart upload (file, model), answered `{"text": …}` (OpenAI's whisper, vLLM,
faster-whisper servers, the fake server). Errors are sorted as a chat call's (agents.providers.
transport): retryable or not, with the server's words.

Such servers bill by the minute of audio, not by the token: the answer's usage is zero tokens,
and its cost is the clip's duration at the config's price per minute (transcription_cost).
"""

from decimal import Decimal

import httpx

from agents.providers import transport
from agents.providers.base import LLMResponse, ProviderError, Usage
from platform_site import outbound

_SECONDS_PER_MINUTE = Decimal(60)


def transcription_body(model: dict, *, file_ref: str, name: str) -> dict:
    """What the ledger records of the request: the clip by its reference, never its bytes."""
    return {"model": model["model"], "file": file_ref, "filename": name, "response_format": "json"}


def transcription_send(
    *, model: dict, api_key: str, body: dict, data: bytes, media_type: str, timeout_cap: float | None = None
) -> LLMResponse:
    url = model["base_url"].rstrip("/") + "/audio/transcriptions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = transport.request_timeout(model, timeout_cap)
    try:
        client = outbound.get_client()
        request = client.build_request(
            "POST",
            url,
            headers=headers,
            data={"model": body["model"], "response_format": "json"},
            files={"file": (body["filename"] or "audio", data, media_type)},
            timeout=timeout,
        )
        # The multipart body in memory: a worker's carried transport sends bodies it can read whole.
        request.read()
        response = client.send(request)
    except httpx.TimeoutException as exc:
        raise ProviderError(f"The transcription request to {url} timed out: {exc}", retryable=True) from exc
    except httpx.TransportError as exc:
        raise ProviderError(f"Could not connect to {url}: {exc}", retryable=True) from exc
    if response.status_code >= 400:
        raise transport.http_error(response, url=url, body=body)
    try:
        raw = response.json()
    except ValueError as exc:
        raise ProviderError(f"{url} returned a body that is not JSON.", retryable=True) from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("text"), str):
        raise ProviderError(f"{url} returned no transcript (a JSON object with its text).", retryable=False, raw=None)
    return LLMResponse(content=raw["text"], tool_calls=[], finish_reason="stop", usage=Usage(), raw=raw)


def transcription_cost(model: dict, duration_ms: int | None) -> Decimal:
    """The clip's minutes (to the second, rounded up) at the model config's price per minute."""
    price = Decimal(model.get("price_audio_per_minute") or 0)
    seconds = -(-(duration_ms or 0) // 1000)
    return price * Decimal(seconds) / _SECONDS_PER_MINUTE
