"""The image, file and audio parts of a request's user messages, whichever the wire.

Each part becomes a Part: the line `{last_user_parts}` renders for it and the prompt tokens it
costs by its provider's published rule (below). The wires are read by fakellm/openai_parts.py
and fakellm/anthropic_parts.py, the bytes by fakellm/media.py; a malformed part is a PartError
the server answers with a 4xx in the provider's format, as a real server would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

URL_IMAGE_TOKENS = 85  # an image the server does not fetch: its size is unknown


class PartError(ValueError):
    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.status, self.param, self.code = message, status, param, code


@dataclass(frozen=True)
class Part:
    kind: str  # image, file or audio
    line: str  # what {last_user_parts} shows for it, starting with a newline
    tokens: int


@dataclass(frozen=True)
class RequestParts:
    # Top-level parts of each user message, by its index among the request's object messages.
    by_message: dict[int, tuple[Part, ...]] = field(default_factory=dict)
    # Parts inside tool results: they cost tokens but are not the user's.
    nested: tuple[Part, ...] = ()
    # The request without its parts: what the server counts as text.
    text_body: dict | None = None

    def _all(self):
        yield from self.nested
        for parts in self.by_message.values():
            yield from parts

    @property
    def present(self) -> bool:
        return bool(self.by_message or self.nested)

    @property
    def tokens(self) -> int:
        return sum(part.tokens for part in self._all())

    @property
    def audio_tokens(self) -> int:
        return sum(part.tokens for part in self._all() if part.kind == "audio")


NO_PARTS = RequestParts()


# The providers' published rules.


def _scaled(width: int, height: int, side: int, limit: int) -> tuple[int, int]:
    """Both edges scaled by limit/side when side is over the limit, rounded down (in integers,
    so 3000x1500 to a 1568 long edge is 1568x784, not 1567x784)."""
    if side <= limit:
        return width, height
    return width * limit // side, height * limit // side


def openai_image_tokens(width: int, height: int, detail: str) -> int:
    """85 for detail "low"; else fit within 2048x2048, shortest side down to 768, 170 a 512px tile."""
    if detail == "low":
        return 85
    width, height = _scaled(width, height, max(width, height), 2048)
    width, height = _scaled(width, height, min(width, height), 768)
    return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)


def anthropic_image_tokens(width: int, height: int) -> int:
    """Long edge down to 1568 keeping the aspect, then width * height / 750."""
    width, height = _scaled(width, height, max(width, height), 1568)
    return math.ceil(width * height / 750)


def audio_tokens(seconds: float) -> int:
    """OpenAI: one token per 100 ms (rounded up)."""
    return math.ceil(round(seconds * 1000) / 100)


def file_tokens(length: int) -> int:
    """A file counts as text: a quarter of its decoded bytes."""
    return math.ceil(length / 4)


def image_part(width: int, height: int, colour: str, tokens: int) -> Part:
    return Part("image", f"\n[image {width}x{height} {colour}]", tokens)


def file_part(name, length: int) -> Part:
    name = name if isinstance(name, str) and name else "document"
    return Part("file", f"\n[file {name} {length} bytes]", file_tokens(length))


def url_image_part() -> Part:
    return Part("image", "\n[image url]", URL_IMAGE_TOKENS)


def audio_part(seconds: float) -> Part:
    return Part("audio", f"\n[audio {seconds:.1f} s]", audio_tokens(seconds))


def object_messages(body: dict) -> list[tuple[int, dict]]:
    """(position in the request, message) of its object messages, as the conversation reads them."""
    return [(i, m) for i, m in enumerate(body.get("messages") or []) if isinstance(m, dict)]


def _has_part(blocks) -> bool:
    for block in blocks if isinstance(blocks, list) else ():
        if isinstance(block, dict) and block.get("type", "text") != "text":
            if block.get("type") != "tool_result" or _has_part(block.get("content")):
                return True
    return False


def carries_parts(body: dict) -> bool:
    """Whether a user message holds anything but text: a cheap look before decoding anything."""
    return any(m.get("role") == "user" and _has_part(m.get("content")) for _, m in object_messages(body))
