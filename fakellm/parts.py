"""The non-text parts of a request's user messages, read from either wire format.

OpenAI user content lists carry `image_url` (a data URL, or an http(s) URL that is never
fetched), `input_audio` (wav or mp3) and `file` parts; Anthropic user content carries `image`
and `document` blocks (base64, or plain text for a document), also inside `tool_result`s.
Each becomes a Part: the line `{last_user_parts}` renders for it and the prompt tokens it costs
by its provider's published rule. A malformed part is a PartError the server answers with a
4xx in the provider's format, as a real server would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fakellm.media import MediaError, data_url, decoded, image_facts, mp3_seconds, wav_seconds

URL_IMAGE_TOKENS = 85  # an image the server does not fetch: its size is unknown
OPENAI_PARTS = ("image_url", "input_audio", "file")
ANTHROPIC_PARTS = ("image", "document")
# Anthropic user blocks that are not content parts and are left to the conversation reader.
ANTHROPIC_OTHER = ("text", "tool_result", "search_result", "tool_use", "thinking", "redacted_thinking")
TOOL_RESULT_OTHER = ("text", "search_result")
AUDIO_FORMATS = {"wav": wav_seconds, "mp3": mp3_seconds}


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


def _image_part(width: int, height: int, colour: str, tokens: int) -> Part:
    return Part("image", f"\n[image {width}x{height} {colour}]", tokens)


def _file_part(name, length: int) -> Part:
    name = name if isinstance(name, str) and name else "document"
    return Part("file", f"\n[file {name} {length} bytes]", file_tokens(length))


def _url_image() -> Part:
    return Part("image", "\n[image url]", URL_IMAGE_TOKENS)


# OpenAI Chat Completions.


def _openai_image(block: dict, path: str) -> Part:
    spec = block.get("image_url")
    spec = {"url": spec} if isinstance(spec, str) else spec
    if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
        raise PartError(f"Missing required parameter: '{path}.image_url.url'.", param=f"{path}.image_url.url")
    detail = spec.get("detail") or "auto"
    if detail not in ("auto", "low", "high"):
        message = f"Invalid value: '{detail}'. Supported values are: 'auto', 'low', and 'high'."
        raise PartError(message, param=f"{path}.image_url.detail", code="invalid_value")
    url = spec["url"]
    if url.startswith(("http://", "https://")):
        return _url_image()
    media_type, raw = data_url(url)
    if not media_type.startswith("image/"):
        message = f"Invalid MIME type {media_type!r}: only image types are supported in '{path}.image_url'."
        raise PartError(message, param=f"{path}.image_url.url", code="invalid_image_format")
    facts = image_facts(raw)
    return _image_part(facts.width, facts.height, facts.colour, openai_image_tokens(facts.width, facts.height, detail))


def _openai_audio(block: dict, path: str) -> Part:
    spec = block.get("input_audio")
    if not isinstance(spec, dict):
        raise PartError(f"Missing required parameter: '{path}.input_audio'.", param=f"{path}.input_audio")
    read = AUDIO_FORMATS.get(spec.get("format"))
    if read is None:
        message = f"Invalid value: {spec.get('format')!r}. Supported values are: 'wav' and 'mp3'."
        raise PartError(message, param=f"{path}.input_audio.format", code="invalid_value")
    seconds = read(decoded(spec.get("data")))
    return Part("audio", f"\n[audio {seconds:.1f} s]", audio_tokens(seconds))


def _openai_file(block: dict, path: str) -> Part:
    spec = block.get("file")
    if not isinstance(spec, dict):
        raise PartError(f"Missing required parameter: '{path}.file'.", param=f"{path}.file")
    data = spec.get("file_data")
    if not isinstance(data, str):
        # A file_id names an upload to OpenAI's files API, which this server does not have.
        raise PartError(f"Missing required parameter: '{path}.file.file_data'.", param=f"{path}.file.file_data")
    raw = data_url(data)[1] if data.startswith("data:") else decoded(data)
    return _file_part(spec.get("filename"), len(raw))


_OPENAI_READERS = {"image_url": _openai_image, "input_audio": _openai_audio, "file": _openai_file}


def _openai_part(block, path: str) -> Part | None:
    if not isinstance(block, dict) or block.get("type", "text") == "text":
        return None
    read = _OPENAI_READERS.get(block.get("type"))
    if read is None:
        message = (
            f"Invalid value: {block.get('type')!r}. Supported values are: 'text', 'image_url', 'input_audio', "
            "and 'file'."
        )
        raise PartError(message, param=f"{path}.type", code="invalid_value")
    try:
        return read(block, path)
    except MediaError as exc:
        raise PartError(f"Invalid '{path}': {exc.message}", exc.status, path, "invalid_value")


def openai_parts(body: dict) -> RequestParts:
    by_message, stripped = {}, []
    for index, (position, message) in enumerate(_object_messages(body)):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            stripped.append(message)
            continue
        parts = [_openai_part(block, f"messages[{position}].content[{j}]") for j, block in enumerate(content)]
        if any(parts):
            by_message[index] = tuple(part for part in parts if part)
            message = {**message, "content": [block for block, part in zip(content, parts) if part is None]}
        stripped.append(message)
    return RequestParts(by_message, (), {**body, "messages": stripped})


# Anthropic Messages.


def _anthropic_image(block: dict, path: str) -> Part:
    source = block.get("source")
    if not isinstance(source, dict):
        raise PartError(f"{path}.source: Field required")
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return _url_image()
    if source.get("type") != "base64":
        raise PartError(f"{path}.source.type: Input should be 'base64' or 'url'")
    declared = source.get("media_type")
    if declared not in ("image/jpeg", "image/png", "image/gif", "image/webp"):
        message = f"{path}.source.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
        raise PartError(message)
    facts = image_facts(decoded(source.get("data")))
    if facts.media_type != declared:
        raise PartError(
            f"{path}.source.base64.data: The image was specified using the {declared} media type, "
            f"but the image appears to be a {facts.media_type} image"
        )
    return _image_part(facts.width, facts.height, facts.colour, anthropic_image_tokens(facts.width, facts.height))


def _anthropic_document(block: dict, path: str) -> Part:
    source = block.get("source")
    if not isinstance(source, dict):
        raise PartError(f"{path}.source: Field required")
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        return _file_part(block.get("title"), len(source["data"].encode()))
    if source.get("type") != "base64":
        raise PartError(f"{path}.source.type: Input should be 'base64' or 'text'")
    if source.get("media_type") != "application/pdf":
        raise PartError(f"{path}.source.media_type: Input should be 'application/pdf'")
    raw = decoded(source.get("data"))
    if not raw.startswith(b"%PDF-"):
        raise PartError(f"{path}.source.base64.data: The PDF specified was not valid.")
    return _file_part(block.get("title"), len(raw))


def _anthropic_part(block, path: str, allowed: tuple[str, ...]) -> Part | None:
    if not isinstance(block, dict) or block.get("type", "text") in allowed:
        return None
    kind = block.get("type")
    if kind not in ANTHROPIC_PARTS:
        expected = ", ".join(f"'{tag}'" for tag in allowed + ANTHROPIC_PARTS)
        message = f"{path}: Input tag {kind!r} found using 'type' does not match any of the expected tags: {expected}"
        raise PartError(message)
    try:
        return (_anthropic_image if kind == "image" else _anthropic_document)(block, path)
    except MediaError as exc:
        raise PartError(f"{path}: {exc.message}", exc.status)


def _anthropic_blocks(blocks: list, path: str, allowed: tuple[str, ...], nested: list | None) -> tuple[list, list]:
    """(the blocks without their parts, the parts); the parts of tool results go to `nested`."""
    kept, parts = [], []
    for j, block in enumerate(blocks):
        part = _anthropic_part(block, f"{path}.{j}", allowed)
        if part is not None:
            parts.append(part)
            continue
        inner = block.get("content") if isinstance(block, dict) and block.get("type") == "tool_result" else None
        if nested is not None and isinstance(inner, list):
            inner_kept, inner_parts = _anthropic_blocks(inner, f"{path}.{j}.content", TOOL_RESULT_OTHER, None)
            nested += inner_parts
            block = {**block, "content": inner_kept}
        kept.append(block)
    return kept, parts


def anthropic_parts(body: dict) -> RequestParts:
    by_message, nested, stripped = {}, [], []
    for index, (position, message) in enumerate(_object_messages(body)):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            stripped.append(message)
            continue
        kept, parts = _anthropic_blocks(content, f"messages.{position}.content", ANTHROPIC_OTHER, nested)
        if parts:
            by_message[index] = tuple(parts)
        stripped.append({**message, "content": kept})
    return RequestParts(by_message, tuple(nested), {**body, "messages": stripped})


# Both.


def _object_messages(body: dict) -> list[tuple[int, dict]]:
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
    return any(m.get("role") == "user" and _has_part(m.get("content")) for _, m in _object_messages(body))
