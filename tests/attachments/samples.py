"""Files for the attachment tests, made on the fly: small, and each one the bad input it names."""

import io
import random
import struct
import wave
import zipfile

from PIL import Image

# 10000 × 5000 = 50 megapixels, a few kilobytes on disk: one-bit pixels, all the same.
BOMB_SIZE = (10_000, 5_000)


def png(size=(40, 30), color=(200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


def jpeg(size=(40, 30), color=(20, 120, 220), exif=None) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "JPEG", **({"exif": exif} if exif is not None else {}))
    return out.getvalue()


def gif() -> bytes:
    out = io.BytesIO()
    Image.new("P", (8, 8), 3).save(out, "GIF")
    return out.getvalue()


def bomb_png() -> bytes:
    out = io.BytesIO()
    Image.new("1", BOMB_SIZE, 0).save(out, "PNG", optimize=True)
    return out.getvalue()


def gps_exif() -> Image.Exif:
    """EXIF naming a camera, a place (GPS: 31.23 N, 121.47 E) and an orientation (rotated 90°)."""
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"  # Make
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to view
    gps = {1: "N", 2: (31.0, 13.0, 48.0), 3: "E", 4: (121.0, 28.0, 12.0)}
    exif[0x8825] = gps  # GPSInfo
    return exif


def zip_bytes(names=("a.txt",)) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name in names:
            archive.writestr(name, "<x/>")
    return out.getvalue()


def docx() -> bytes:
    return zip_bytes(("[Content_Types].xml", "word/document.xml"))


def wav(seconds=1.5, rate=8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(rate)
        clip.writeframes(b"\x00\x00" * int(seconds * rate))
    return out.getvalue()


def mp3_cbr(frames=100) -> bytes:
    """MPEG-1 layer III frames at 128 kbit/s, 44.1 kHz: 417 bytes and 1152 samples each."""
    header = bytes([0xFF, 0xFB, 0x90, 0x64])
    return (header + b"\x00" * 413) * frames


def ogg_opus(seconds=2.0) -> bytes:
    def page(granule: int, body: bytes) -> bytes:
        return b"OggS\x00\x00" + struct.pack("<q", granule) + b"\x00" * 12 + bytes([1, len(body)]) + body

    head = b"OpusHead\x01\x01\x38\x01\x80\xbb\x00\x00\x00\x00\x00"
    return page(0, head) + page(int(seconds * 48000), b"\x00" * 10)


SVG_WITH_SCRIPT = b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'


def noise_png(size=(64, 64)) -> bytes:
    """A PNG that does not compress: its size in bytes is about 3 × its pixels."""
    out = io.BytesIO()
    pixels = random.Random(0).randbytes(size[0] * size[1] * 3)
    Image.frombytes("RGB", size, pixels).save(out, "PNG")
    return out.getvalue()


def jpeg_with_zip() -> bytes:
    """A JPEG with a zip archive appended: a picture to one reader, an archive to another."""
    return jpeg() + zip_bytes(("payload.txt",))


def gifar() -> bytes:
    """A GIF with a Java archive appended (a "GIFAR")."""
    return gif() + zip_bytes(("META-INF/MANIFEST.MF", "Evil.class"))
