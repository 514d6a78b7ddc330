"""A message's parts: how a message that carries attachments describes them, and how they travel
to a model.

A Message (and the RunRequest of a run waiting its turn) keeps its text in `content` and its
attachments in `parts`: null for a text-only message (the common case costs nothing), else the
attachments in order, each described by `part_of` with what a model call, the timeline and the
API need without reading the attachment's row:

    {"type": "image" | "file" | "audio", "attachment": "<uuid>", "media_type": "image/png",
     "name": "photo.png", "size": 12345, "width": 640, "height": 480, "duration_ms": 1200}

(width and height for images, duration_ms for audio where known; absent otherwise).

In the engine's internal format (the OpenAI chat format, engine.context.message_to_wire) a
message with parts has a list as its content: its text first as {"type": "text", "text": …},
then these descriptors as they are. Each provider adapter maps them to its wire format
(agents.providers); the request written to the ledger names the attachment by a reference
(`ref`), never its bytes, and the bytes are put in just before the request is sent."""

from collections.abc import Sequence

from agents.providers.media import DATA_URL_PREFIX, REF_PREFIX, TEXT_PREFIX, data_url_ref, ref, text_ref
from attachments.models import Attachment

PART_TYPES = ("image", "file", "audio")
# What a request written to the ledger holds instead of an attachment's bytes (ref: the base64
# text itself, data_url_ref: a data: URL of them, text_ref: the bytes as text) lives with the
# provider adapters that write them, below this app: agents.providers.media.
__all__ = [
    "DATA_URL_PREFIX",
    "PART_TYPES",
    "REF_PREFIX",
    "TEXT_PREFIX",
    "data_url_ref",
    "part_of",
    "parts_of",
    "ref",
    "text_ref",
    "wire_content",
]


def part_of(attachment: Attachment) -> dict:
    """The descriptor of `attachment` in a message's parts (see the module's docstring)."""
    part = {
        "type": attachment.kind,
        "attachment": str(attachment.pk),
        "media_type": attachment.media_type,
        "name": attachment.name,
        "size": attachment.size,
    }
    for field in ("width", "height", "duration_ms"):
        value = getattr(attachment, field)
        if value is not None:
            part[field] = value
    return part


def parts_of(attachments: Sequence[Attachment]) -> list[dict] | None:
    """A message's `parts` for these attachments: None for none, so a text message stays null."""
    return [part_of(attachment) for attachment in attachments] or None


def wire_content(content: str, parts: list[dict] | None) -> str | list[dict]:
    """A message's content in the internal format: its text alone, or its text and its parts."""
    if not parts:
        return content
    return [{"type": "text", "text": content}, *parts] if content else list(parts)
