"""Pieces shared by the OpenAI and Anthropic renderers."""

from __future__ import annotations

import json
from dataclasses import dataclass

TEXT_PIECE = 4  # characters per streamed text delta
ARGS_PIECE = 8  # characters per streamed tool-argument fragment

STATUS_MESSAGES = {
    400: "Bad request.",
    401: "Invalid authentication.",
    403: "Permission denied.",
    404: "Not found.",
    408: "Request timed out.",
    429: "Rate limit reached for requests. Please try again later.",
    500: "The server had an error while processing your request.",
    502: "Bad gateway.",
    503: "The engine is currently overloaded, please try again later.",
    529: "Overloaded.",
}


@dataclass(frozen=True)
class Meta:
    """Per-response facts that do not come from the reply step itself."""

    model: str
    created: int
    digest: str  # sha256 hex of the request messages: deterministic ids
    settings: dict  # the script's merged defaults

    @property
    def short(self) -> str:
        return self.digest[:8]


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def status_message(status: int) -> str:
    return STATUS_MESSAGES.get(status, f"Scripted HTTP {status} error.")
