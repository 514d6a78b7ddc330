"""What every provider adapter returns, and how it fails."""

import email.utils
import json
import math
import time
from dataclasses import dataclass, field


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw text as the model produced it; parsed later, tolerantly


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    estimated: bool = False


@dataclass
class LLMResponse:
    content: str
    tool_calls: list[ToolCall]
    finish_reason: str  # normalised to the OpenAI vocabulary: stop, tool_calls, length, …
    usage: Usage
    raw: dict
    http_status: int = 200
    # Reasoning that must be sent back with this message in later calls (Anthropic thinking).
    reasoning: list[dict] | None = None


@dataclass
class ProviderError(Exception):
    message: str
    retryable: bool
    http_status: int | None = None
    retry_after: float | None = None
    raw: dict | None = field(default=None)

    def __str__(self):
        return self.message


RETRYABLE_STATUSES = {408, 409, 425, 429}


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After is either delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def estimate_tokens(value) -> int:
    """A rough count for providers that report no usage and for context budgets: about four
    characters a token for ASCII text, one a token for other scripts (Chinese runs close to
    that in common tokenisers), so the estimate errs on the high side for seed 000's text."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if text.isascii():
        return math.ceil(len(text) / 4)
    # UTF-8 spends two extra bytes on a CJK character: counted at C speed, not per character.
    wide = (len(text.encode()) - len(text)) // 2
    return math.ceil((len(text) - wide) / 4) + wide
