"""What every provider adapter returns, and how it fails."""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from agents.providers import media


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
    # Of prompt_tokens: those of images and audio (as the server reports, else by the provider's
    # published rules).
    image_tokens: int = 0
    audio_tokens: int = 0
    # Of prompt_tokens: those written to the provider's prompt cache (Anthropic reports them).
    cache_write_tokens: int = 0


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
    # The request was too long for the model's context: folding the context may help.
    context_overflow: bool = False
    # The server refused a streamed request it would answer unstreamed (llama.cpp with tools).
    stream_unsupported: bool = False

    def __str__(self):
        return self.message


class Provider(Protocol):
    """What the engine asks of a provider adapter (OpenAI-compatible, Anthropic).

    `model` is the snapshot's model (agents.snapshot.ModelSnapshot) and `messages` are in the
    internal format, the OpenAI chat format; an adapter maps both to its wire format in
    `build_request` (with `cache_key`, what groups requests sharing a prefix on a provider's
    prompt cache: agents.providers.caching), which the engine writes to the LLMCall row before `send` makes the call.
    `send` streams when the body asks for it, handing text to `on_delta` as it arrives, and
    returns the parsed answer or raises ProviderError (retryable or not)."""

    kind: ClassVar[str]

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
    ) -> dict: ...

    def send(
        self,
        *,
        model: dict,
        api_key: str,
        body: dict,
        on_delta: Callable[[str], None] | None = None,
        timeout_cap: float | None = None,
    ) -> LLMResponse: ...

    def estimate_usage(self, *, body: dict, response: LLMResponse) -> Usage:
        """What the estimate rule below says `body` and `response` hold, as for an answer whose
        server reports no usage (agents.providers.calibration compares it with what one did)."""
        ...


# Token estimates stand in when a server reports no usage, and size the context against a
# model's window. Checked against cl100k_base and o200k_base counts (tests/agents/test_usage_estimates.py):
# English prose runs ~4.5-5.5 characters a token, but JSON, code and numbers far fewer (~2), which
# is where plain chars/4 ran some 25 % low on tool-heavy conversations. So text is counted by
# pieces: a letter run costs one token per 6 letters (most words are one token), digits go in
# threes (the tokenisers group them so), punctuation about two tokens per three marks, a line
# break with its indent one, and a CJK character one (cl100k ~1.2, o200k ~0.85 per character).
# A model with a tokeniser of its own counts differently: a call's estimate is then scaled by what
# its model config learned from the calls whose server reported usage (agents.providers.calibration).
_CJK = "\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
# One group per kind of piece, tried in this order at each position. A run of CJK characters is
# one match costing its length (the same as one match per character, and far fewer matches to
# walk: estimating is on every step's path, over the whole history it sends).
_PIECES = re.compile(
    rf"(?P<cjk>[{_CJK}]+)|(?P<word>[^\W\d_{_CJK}]+)|(?P<digits>\d+)|(?P<mark>[^\w\s{_CJK}]+)|(?P<line>\s*\n\s*)"
)
_CJK_RUN, _WORD, _DIGITS, _MARK = 1, 2, 3, 4

# Chat formats wrap every message in a few tokens (OpenAI documents 3, plus 3 to start the
# reply); a tool definition is rendered with its name, description and schema plus some framing.
MESSAGE_OVERHEAD = 4
REPLY_OVERHEAD = 3
TOOL_OVERHEAD = 10


def estimate_tokens(value) -> int:
    """Estimated tokens of a text (or of a JSON value's text), by the rule above."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    tokens = 0
    for piece in _PIECES.finditer(text):
        kind, (start, end) = piece.lastindex, piece.span()
        length = end - start
        if kind == _CJK_RUN:
            tokens += length
        elif kind == _WORD:
            tokens += (length + 5) // 6  # ceil(length / 6)
        elif kind == _DIGITS:
            tokens += (length + 2) // 3
        elif kind == _MARK:
            tokens += (2 * length + 2) // 3
        else:  # a line break with its indent
            tokens += 1
    return tokens


def _content_tokens(content, provider: str | None) -> int:
    """A list content with attachments is counted part by part: its text by the rule above, an
    attachment's descriptor by its provider's rule (agents.providers.media), and a provider's
    wire block for one not at all (the model call adds the part by the rule; its reference or its
    bytes are no text). Any other content is counted as its text, or its JSON's."""
    if not isinstance(content, list) or not any(_is_media(block) for block in content):
        return estimate_tokens(content or "")
    tokens = 0
    for block in content:
        if media.is_part(block):
            tokens += media.part_tokens(block, provider).total
        elif isinstance(block, dict) and block.get("type") == "text":
            tokens += estimate_tokens(block.get("text") or "")
        elif not _is_media(block):
            tokens += estimate_tokens(block)
    return tokens


def _is_media(block) -> bool:
    return isinstance(block, dict) and (media.is_part(block) or block.get("type") in media.WIRE_MEDIA_BLOCKS)


def estimate_message_tokens(message: dict, *, provider: str | None = None) -> int:
    """Estimated tokens of a message; `provider` (its kind) picks the rule for its images."""
    tokens = MESSAGE_OVERHEAD + _content_tokens(message.get("content"), provider)
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        tokens += MESSAGE_OVERHEAD + estimate_tokens(function.get("name") or "")
        tokens += estimate_tokens(function.get("arguments") or "")
    return tokens


def estimate_prompt_tokens(*, messages: list[dict], tools: list[dict] = (), provider: str | None = None) -> int:
    """Estimated prompt tokens of a chat request: messages with their framing, tool definitions."""
    return (
        REPLY_OVERHEAD
        + sum(estimate_message_tokens(m, provider=provider) for m in messages)
        + sum(TOOL_OVERHEAD + estimate_tokens(t) for t in tools)
    )
