"""The fake server's token counting: for usage it reports and for its context window.

`chars` (the default) is a quarter of the characters of the prompt's JSON, cheap and good
enough for scripted usage. `cl100k_base` and `o200k_base` count with the real OpenAI
tokenisers (the `bpe-openai` package, which ships their vocabularies), by OpenAI's documented
chat formula: 3 tokens framing each message, 3 priming the reply. Clients can then check their
own estimates against what a real tokeniser says, and a context window behaves like a real one.
`token_scale` multiplies either count (rounded up): a model whose own tokeniser spends more or
fewer tokens than OpenAI's on the same text (Qwen's on Chinese, say), so a client's estimates
are off by a steady factor that it can learn from the usage the server reports.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import cache

from fakellm.parts import NO_PARTS, RequestParts
from fakellm.prompt_cache import has_breakpoints, without_breakpoints

COUNTINGS = ("chars", "cl100k_base", "o200k_base")
_PER_MESSAGE = 3
_REPLY_PRIMING = 3


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@cache
def _counter(counting: str) -> Callable[[str], int]:
    if counting == "chars":
        return lambda text: math.ceil(len(text) / 4)
    import bpe_openai  # only the real tokenisers need it

    encoding = bpe_openai.get_encoding(counting)
    return lambda text: len(encoding.encode(text))


def text_counter(counting: str, scale: float = 1) -> Callable[[str], int]:
    count = _counter(counting)
    return count if scale == 1 else lambda text: math.ceil(count(text) * scale)


def prompt_tokens(body: dict, counting: str, scale: float = 1, parts: RequestParts = NO_PARTS) -> int:
    """The text's tokens (the request without its image, file and audio parts), then each
    part's by its provider's rule (fakellm/parts.py), which token_scale leaves alone."""
    text_body = parts.text_body or body
    if has_breakpoints(text_body):
        text_body = without_breakpoints(text_body)  # an Anthropic request's cache breakpoints are no text
    return math.ceil(_prompt_tokens(text_body, counting) * scale) + parts.tokens


def _prompt_tokens(body: dict, counting: str) -> int:
    count = _counter(counting)
    if counting == "chars":
        parts = [body[key] for key in ("system", "messages", "tools") if key in body]
        return count(json.dumps(parts, ensure_ascii=False))
    tokens = _REPLY_PRIMING
    if body.get("system"):
        tokens += _PER_MESSAGE + count(_text(body["system"]))
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        tokens += _PER_MESSAGE + count(str(message.get("role", ""))) + count(_text(message.get("content") or ""))
        for call in message.get("tool_calls") or []:
            function = (call.get("function") or {}) if isinstance(call, dict) else {}
            tokens += count(_text(function.get("name") or "")) + count(_text(function.get("arguments") or ""))
    for tool in body.get("tools") or []:
        tokens += count(_text(tool))
    return tokens
