"""Anthropic Messages user content: `image` blocks (base64, or a URL that is never fetched) and
`document` blocks (a base64 PDF, or plain text), also inside a `tool_result`'s content, where
they cost tokens without being the user's. Errors name the block's path, as the API does."""

from __future__ import annotations

from fakellm.media import MediaError, decoded, image_facts
from fakellm.parts import (
    Part,
    PartError,
    RequestParts,
    anthropic_image_tokens,
    file_part,
    image_part,
    object_messages,
    url_image_part,
)

PART_BLOCKS = ("image", "document")
# User blocks that are not parts: the conversation reader's business.
OTHER_BLOCKS = ("text", "tool_result", "search_result", "tool_use", "thinking", "redacted_thinking")
TOOL_RESULT_OTHER_BLOCKS = ("text", "search_result")


def _image(block: dict, path: str) -> Part:
    source = block.get("source")
    if not isinstance(source, dict):
        raise PartError(f"{path}.source: Field required")
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return url_image_part()
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
    return image_part(facts.width, facts.height, facts.colour, anthropic_image_tokens(facts.width, facts.height))


def _document(block: dict, path: str) -> Part:
    source = block.get("source")
    if not isinstance(source, dict):
        raise PartError(f"{path}.source: Field required")
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        return file_part(block.get("title"), len(source["data"].encode()))
    if source.get("type") != "base64":
        raise PartError(f"{path}.source.type: Input should be 'base64' or 'text'")
    if source.get("media_type") != "application/pdf":
        raise PartError(f"{path}.source.media_type: Input should be 'application/pdf'")
    raw = decoded(source.get("data"))
    if not raw.startswith(b"%PDF-"):
        raise PartError(f"{path}.source.base64.data: The PDF specified was not valid.")
    return file_part(block.get("title"), len(raw))


def _part(block, path: str, allowed: tuple[str, ...]) -> Part | None:
    if not isinstance(block, dict) or block.get("type", "text") in allowed:
        return None
    kind = block.get("type")
    if kind not in PART_BLOCKS:
        expected = ", ".join(f"'{tag}'" for tag in allowed + PART_BLOCKS)
        message = f"{path}: Input tag {kind!r} found using 'type' does not match any of the expected tags: {expected}"
        raise PartError(message)
    try:
        return (_image if kind == "image" else _document)(block, path)
    except MediaError as exc:
        raise PartError(f"{path}: {exc.message}", exc.status)


def _blocks(blocks: list, path: str, allowed: tuple[str, ...], nested: list | None) -> tuple[list, list]:
    """(the blocks without their parts, the parts); the parts of tool results go to `nested`."""
    kept, parts = [], []
    for j, block in enumerate(blocks):
        part = _part(block, f"{path}.{j}", allowed)
        if part is not None:
            parts.append(part)
            continue
        inner = block.get("content") if isinstance(block, dict) and block.get("type") == "tool_result" else None
        if nested is not None and isinstance(inner, list):
            inner_kept, inner_parts = _blocks(inner, f"{path}.{j}.content", TOOL_RESULT_OTHER_BLOCKS, None)
            nested += inner_parts
            block = {**block, "content": inner_kept}
        kept.append(block)
    return kept, parts


def anthropic_parts(body: dict) -> RequestParts:
    by_message, nested, stripped = {}, [], []
    for index, (position, message) in enumerate(object_messages(body)):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            stripped.append(message)
            continue
        kept, parts = _blocks(content, f"messages.{position}.content", OTHER_BLOCKS, nested)
        if parts:
            by_message[index] = tuple(parts)
        stripped.append({**message, "content": kept})
    return RequestParts(by_message, tuple(nested), {**body, "messages": stripped})
