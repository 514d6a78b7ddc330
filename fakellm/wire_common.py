"""Pieces shared by the OpenAI and Anthropic renderers."""

from __future__ import annotations

import json
import re
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


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def dumps(value) -> str:
    # A lone surrogate (half of an escaped pair, which some models emit) cannot be encoded as
    # UTF-8; it is sent as the JSON escape such a model writes.
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def status_message(status: int) -> str:
    return STATUS_MESSAGES.get(status, f"Scripted HTTP {status} error.")
