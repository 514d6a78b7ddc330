"""What the fake server reads from a part's bytes: base64 and data URLs, an image's size and
average colour, an audio clip's duration. Pure functions over bytes; no I/O, nothing fetched.

Every refusal is a MediaError whose message a real server could have written; the wire walkers
(fakellm/parts.py) put it in the provider's error format.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct
import warnings
from dataclasses import dataclass

from PIL import Image, ImageStat

MAX_DECODED_BYTES = 20 * 1024 * 1024
MAX_IMAGE_SIDE = 8000  # Anthropic's published limit; OpenAI refuses far larger images too
IMAGE_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
_DATA_URL = re.compile(r"data:(?P<type>[^;,]*)(?P<params>(?:;[^;,]*)*?);base64,(?P<data>.*)", re.DOTALL)


class MediaError(ValueError):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class ImageFacts:
    width: int
    height: int
    colour: str  # "#rrggbb", the mean of each RGB channel, rounded
    media_type: str


def decoded(data) -> bytes:
    """The bytes of a base64 string, refused when malformed or over MAX_DECODED_BYTES (413)."""
    if not isinstance(data, str) or not data:
        raise MediaError("The base64 data is missing.")
    if len(data) // 4 * 3 > MAX_DECODED_BYTES + 3:
        raise MediaError(f"The part is larger than {MAX_DECODED_BYTES // (1024 * 1024)} MB.", status=413)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("The data is not valid base64.")
    if len(raw) > MAX_DECODED_BYTES:
        raise MediaError(f"The part is larger than {MAX_DECODED_BYTES // (1024 * 1024)} MB.", status=413)
    return raw


def data_url(url: str) -> tuple[str, bytes]:
    """(media type, bytes) of a `data:<type>;base64,<data>` URL."""
    found = _DATA_URL.fullmatch(url)
    if found is None:
        raise MediaError("Expected a base64-encoded data URL (data:<media type>;base64,<data>).")
    return found.group("type").lower(), decoded(found.group("data"))


def image_facts(raw: bytes) -> ImageFacts:
    """Size and average colour of a PNG, JPEG, GIF or WebP image (a GIF's first frame)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(raw))
            if image.format not in IMAGE_FORMATS:
                raise MediaError(
                    f"Unsupported image format {image.format}: use one of png, jpeg, gif or webp.",
                )
            width, height = image.size
            if max(width, height) > MAX_IMAGE_SIDE:
                raise MediaError(f"Image dimensions exceed max allowed size: {MAX_IMAGE_SIDE} pixels.")
            image.load()
            mean = ImageStat.Stat(image.convert("RGB")).mean
    except MediaError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise MediaError("Could not process image: the data is not a valid image.")
    colour = "#" + "".join(f"{round(channel):02x}" for channel in mean[:3])
    return ImageFacts(width, height, colour, IMAGE_FORMATS[image.format])


def wav_seconds(raw: bytes) -> float:
    """Duration of a RIFF/WAVE clip from its header: the data chunk's size over the byte rate."""
    if len(raw) < 12 or raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise MediaError("The audio data is not a WAV file.")
    byte_rate = data_size = None
    offset = 12
    while offset + 8 <= len(raw):
        chunk, size = raw[offset : offset + 4], struct.unpack_from("<I", raw, offset + 4)[0]
        if chunk == b"fmt " and size >= 16 and offset + 16 <= len(raw):
            byte_rate = struct.unpack_from("<I", raw, offset + 16)[0]
        elif chunk == b"data":
            # A streamed WAV may say 0 or 0xFFFFFFFF: what is there counts.
            data_size = min(size, len(raw) - offset - 8) if size not in (0, 0xFFFFFFFF) else len(raw) - offset - 8
            break
        offset += 8 + size + (size & 1)
    if not byte_rate or data_size is None:
        return 0.0
    return data_size / byte_rate


# MPEG audio layer III: kbit/s by bitrate index, for MPEG-1 and for MPEG-2/2.5.
_MP3_KBPS = {
    1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {1: (44100, 48000, 32000), 2: (22050, 24000, 16000), 25: (11025, 12000, 8000)}
_MP3_SCAN = 64 * 1024


def _id3_end(raw: bytes) -> int:
    if raw[:3] != b"ID3" or len(raw) < 10:
        return 0
    size = (raw[6] & 0x7F) << 21 | (raw[7] & 0x7F) << 14 | (raw[8] & 0x7F) << 7 | (raw[9] & 0x7F)
    return 10 + size + (10 if raw[5] & 0x10 else 0)


def _mp3_frame(raw: bytes, at: int) -> tuple[int, int, int, int] | None:
    """(version, kbit/s, sample rate, channel mode) of a layer III frame header at `at`."""
    b1, b2, b3 = raw[at + 1], raw[at + 2], raw[at + 3]
    version = {3: 1, 2: 2, 0: 25}.get(b1 >> 3 & 3)
    bitrate_index, rate_index = b2 >> 4, b2 >> 2 & 3
    if version is None or (b1 >> 1 & 3) != 1 or bitrate_index in (0, 15) or rate_index == 3:
        return None
    kbps = _MP3_KBPS[1 if version == 1 else 2][bitrate_index]
    return version, kbps, _MP3_RATES[version][rate_index], b3 >> 6


def mp3_seconds(raw: bytes) -> float:
    """Duration of an MP3 clip: its Xing/Info frame count when it has one, else its length over
    the first frame's bitrate; 0.0 when no frame header is found."""
    start = _id3_end(raw)
    end = len(raw) - (128 if raw[-128:-125] == b"TAG" else 0)
    for at in range(start, min(end - 4, start + _MP3_SCAN)):
        if raw[at] != 0xFF or raw[at + 1] & 0xE0 != 0xE0:
            continue
        frame = _mp3_frame(raw, at)
        if frame is None:
            continue
        version, kbps, rate, mode = frame
        samples = 1152 if version == 1 else 576
        side = (17 if mode == 3 else 32) if version == 1 else (9 if mode == 3 else 17)
        tag = raw[at + 4 + side : at + 8 + side]
        if tag in (b"Xing", b"Info") and len(raw) >= at + 16 + side:
            flags, frames = struct.unpack_from(">II", raw, at + 8 + side)
            if flags & 1:
                return frames * samples / rate
        return (end - at) * 8 / (kbps * 1000)
    return 0.0
