"""What the fake server reads from image, audio and file bytes, and the token rules it reports
them with. No server, no Django."""

from __future__ import annotations

import io
import struct

import pytest
from PIL import Image

from fakellm.media import MediaError, image_facts, mp3_seconds, wav_seconds
from fakellm.parts import anthropic_image_tokens, audio_tokens, file_tokens, openai_image_tokens


def png(width: int, height: int, colour=(0, 0, 0)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, "PNG")
    return buffer.getvalue()


def wav(seconds: float, rate: int = 8000, channels: int = 1, bits: int = 16) -> bytes:
    byte_rate = rate * channels * bits // 8
    data = b"\0" * int(seconds * byte_rate)
    fmt = struct.pack("<HHIIHH", 1, channels, rate, byte_rate, channels * bits // 8, bits)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


# MPEG-1 layer III, 128 kbit/s, 44.1 kHz, stereo: 417-byte frames.
MP3_HEADER = b"\xff\xfb\x90\x00"
MP3_FRAME = MP3_HEADER + b"\0" * 413


@pytest.mark.parametrize(
    ("width", "height", "detail", "tokens"),
    [
        (512, 512, "auto", 85 + 170 * 1),
        (513, 512, "high", 85 + 170 * 2),
        # 1024x1024 -> shortest side 768: 768x768, 2x2 tiles
        (1024, 1024, "auto", 85 + 170 * 4),
        # 4096x2048 -> within 2048: 2048x1024 -> shortest 768: 1536x768, 3x2 tiles
        (4096, 2048, "high", 85 + 170 * 6),
        # 800x600: shortest side 600 is kept; 2x2 tiles
        (800, 600, "auto", 85 + 170 * 4),
        (4096, 2048, "low", 85),
    ],
)
def test_openai_image_tokens(width, height, detail, tokens):
    assert openai_image_tokens(width, height, detail) == tokens


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (200, 200, 54),  # 40000 / 750 = 53.3
        (1024, 1024, 1399),  # 1048576 / 750 = 1398.1
        (3000, 1500, 1640),  # -> 1568x784: 1229312 / 750 = 1639.1
        (1568, 100, 210),  # the long edge at the limit is kept: 156800 / 750 = 209.1
    ],
)
def test_anthropic_image_tokens(width, height, tokens):
    assert anthropic_image_tokens(width, height) == tokens


def test_audio_and_file_tokens():
    assert audio_tokens(1.0) == 10
    assert audio_tokens(2.60625) == 27  # 2606 ms
    assert audio_tokens(0.0) == 0
    assert file_tokens(14) == 4
    assert file_tokens(0) == 0


def test_image_facts_size_and_average_colour():
    image = Image.new("RGB", (3, 1))
    for x, colour in enumerate([(255, 0, 0), (0, 255, 0), (0, 0, 255)]):
        image.putpixel((x, 0), colour)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    facts = image_facts(buffer.getvalue())
    assert (facts.width, facts.height, facts.colour, facts.media_type) == (3, 1, "#555555", "image/png")


def test_image_facts_ignore_alpha_and_read_other_formats():
    buffer = io.BytesIO()
    Image.new("RGBA", (4, 2), (16, 32, 48, 128)).save(buffer, "WEBP", lossless=True)
    assert image_facts(buffer.getvalue()).colour == "#102030"
    buffer = io.BytesIO()
    Image.new("P", (2, 2), 0).save(buffer, "GIF")
    assert image_facts(buffer.getvalue()).media_type == "image/gif"


@pytest.mark.parametrize(
    "data",
    [b"", b"not an image", png(10, 10)[:40], png(8001, 1)],
    ids=["empty", "garbage", "truncated", "too-wide"],
)
def test_image_facts_refuse_what_is_not_a_usable_image(data):
    with pytest.raises(MediaError):
        image_facts(data)


def test_image_facts_refuse_other_formats():
    buffer = io.BytesIO()
    Image.new("RGB", (2, 2)).save(buffer, "BMP")
    with pytest.raises(MediaError, match="BMP"):
        image_facts(buffer.getvalue())


def test_wav_duration_from_its_header():
    assert wav_seconds(wav(1.5)) == 1.5
    assert wav_seconds(wav(0.25, rate=44100, channels=2)) == pytest.approx(0.25, abs=1e-4)
    with pytest.raises(MediaError):
        wav_seconds(b"ID3 not a wav at all")
    assert wav_seconds(wav(1.0)[:44]) == 0.0  # the header alone: no samples


def test_mp3_duration_from_bitrate_or_xing_frame_count():
    frames = MP3_FRAME * 100
    assert mp3_seconds(frames) == 41700 * 8 / 128000  # 2.60625 s
    # An ID3v2 tag first (size 20, synchsafe) and an ID3v1 tag last are not audio.
    tagged = b"ID3\x04\x00\x00\x00\x00\x00\x14" + b"\0" * 20 + frames + b"TAG" + b"\0" * 125
    assert mp3_seconds(tagged) == 41700 * 8 / 128000
    # Stereo MPEG-1: the Xing tag sits after 32 bytes of side information.
    xing = MP3_HEADER + b"\0" * 32 + b"Xing" + struct.pack(">II", 1, 1000)
    xing += b"\0" * (417 - len(xing))
    assert mp3_seconds(xing + frames) == pytest.approx(1000 * 1152 / 44100)
    assert mp3_seconds(b"\0" * 1000) == 0.0
