"""Attachments in a model request: the references a request holds instead of their bytes, and the
tokens each provider's published rule counts for them.

A message's parts (attachments.parts) reach an adapter as descriptors in a list content. The
adapter maps each to its wire format with a reference in place of the bytes, so the request
written to the ledger stays small and free of the user's data; the bytes are put in just before
sending (attachments.inline). A reference is a prefix and the attachment's id:

    attachment:<uuid>            the bytes as base64
    attachment-data-url:<uuid>   a data: URL of them
    attachment-text:<uuid>       the bytes as UTF-8 text (a text file sent as a text document)

Tokens. An image is counted by the rule of the provider it is sent to:
- OpenAI (high detail): scaled to fit 2048x2048, then its shortest side down to 768 if longer;
  85 tokens plus 170 per 512-pixel tile (85 in all at low detail);
- Anthropic: scaled so its long edge is at most 1568, then ceil(width * height / 750);
- elsewhere, or when its size is unknown, a flat figure.
Audio counts 10 tokens a second, ceil(duration_ms / 100) (what OpenAI's audio models report; a
server that reports its own count is believed). A file is counted as text by its size when it
is text, else by a flat figure: the server's own count replaces the estimate when it reports one.
"""

import math
from dataclasses import dataclass

REF_PREFIX = "attachment:"
DATA_URL_PREFIX = "attachment-data-url:"
TEXT_PREFIX = "attachment-text:"
PREFIXES = (REF_PREFIX, DATA_URL_PREFIX, TEXT_PREFIX)

# An image whose provider rule or size is unknown: about a 1024x1024 image under OpenAI's rule.
IMAGE_TOKENS_FLAT = 765
# A file that is not text (a PDF): a couple of pages' worth.
FILE_TOKENS_FLAT = 1500
# Bytes of a text file per token (plain chars/4).
TEXT_FILE_BYTES_PER_TOKEN = 4
# The wire blocks adapters send attachments in (OpenAI's, Anthropic's): no text of theirs is
# counted, only the part they carry (engine.model_call adds it by the rule above).
WIRE_MEDIA_BLOCKS = frozenset({"image_url", "input_audio", "file", "image", "document"})
PART_TYPES = frozenset({"image", "audio", "file"})


def ref(part: dict) -> str:
    """The reference a ledger's request holds for this part's bytes as base64."""
    return f"{REF_PREFIX}{part['attachment']}"


def data_url_ref(part: dict) -> str:
    """The reference a ledger's request holds for this part's bytes as a data: URL."""
    return f"{DATA_URL_PREFIX}{part['attachment']}"


def text_ref(part: dict) -> str:
    """The reference a ledger's request holds for this part's bytes as UTF-8 text."""
    return f"{TEXT_PREFIX}{part['attachment']}"


def is_part(block) -> bool:
    """Whether a list content's item is an attachment's descriptor (attachments.parts)."""
    return isinstance(block, dict) and block.get("type") in PART_TYPES and "attachment" in block


def _scaled(width: int, height: int, side: int, limit: int) -> tuple[int, int]:
    """Both edges scaled by limit/side when `side` is over the limit, rounded down in integers
    (3000x1500 to a 1568 long edge is 1568x784, where floats give 1567)."""
    if side <= limit:
        return width, height
    return width * limit // side, height * limit // side


def openai_image_tokens(width: int, height: int, *, detail: str = "high") -> int:
    if detail == "low":
        return 85
    width, height = _scaled(width, height, max(width, height), 2048)
    width, height = _scaled(width, height, min(width, height), 768)
    return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)


def anthropic_image_tokens(width: int, height: int) -> int:
    width, height = _scaled(width, height, max(width, height), 1568)
    return math.ceil(width * height / 750)


def audio_tokens(duration_ms: int | None) -> int:
    return math.ceil((duration_ms or 0) / 100)


def image_tokens(part: dict, provider: str | None) -> int:
    width, height = part.get("width"), part.get("height")
    if not (width and height):
        return IMAGE_TOKENS_FLAT
    if provider == "openai_compatible":
        return openai_image_tokens(width, height)
    if provider == "anthropic":
        return anthropic_image_tokens(width, height)
    return IMAGE_TOKENS_FLAT


def file_tokens(part: dict) -> int:
    if str(part.get("media_type", "")).startswith("text/"):
        return math.ceil(int(part.get("size") or 0) / TEXT_FILE_BYTES_PER_TOKEN)
    return FILE_TOKENS_FLAT


@dataclass(frozen=True)
class MediaTokens:
    """The tokens of the parts a request sends, by kind."""

    image: int = 0
    audio: int = 0
    file: int = 0

    @property
    def total(self) -> int:
        return self.image + self.audio + self.file


def part_tokens(part: dict, provider: str | None) -> MediaTokens:
    kind = part["type"]
    if kind == "image":
        return MediaTokens(image=image_tokens(part, provider))
    if kind == "audio":
        return MediaTokens(audio=audio_tokens(part.get("duration_ms")))
    return MediaTokens(file=file_tokens(part))


def has_parts(messages: list[dict]) -> bool:
    """Whether any message carries parts (a list content): a text-only request skips the rest."""
    return any(isinstance(message.get("content"), list) for message in messages)


def media_tokens(messages: list[dict], provider: str | None) -> MediaTokens:
    """The tokens of the parts `messages` (internal format) send to `provider`, by its rules."""
    image = audio = file = 0
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if is_part(block):
                tokens = part_tokens(block, provider)
                image, audio, file = image + tokens.image, audio + tokens.audio, file + tokens.file
    return MediaTokens(image, audio, file)
