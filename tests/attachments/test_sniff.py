"""The bad-input sweep of attachments.sniff (no database): every refused file says why, every
accepted one is typed from its bytes, and an image's metadata does not survive."""

import io

import pytest
from PIL import Image, PngImagePlugin

from attachments.sniff import AttachmentRefused, name_clean, sniff
from tests.attachments import samples

LIMIT = 25_000_000


def _refused(data: bytes, name: str = "") -> str:
    with pytest.raises(AttachmentRefused) as caught:
        sniff(data, name, max_pixels=LIMIT)
    assert str(caught.value)
    return caught.value.code


@pytest.mark.parametrize(
    ("data", "name", "code"),
    [
        (b"", "a.png", "empty"),
        (samples.png()[:60], "a.png", "truncated"),
        (samples.jpeg()[:200], "a.jpg", "truncated"),
        (samples.bomb_png(), "big.png", "pixels"),
        (samples.gif() + b"<script>alert(1)</script>", "a.gif", "polyglot"),
        (samples.gif() + samples.zip_bytes(), "a.gif", "polyglot"),
        (samples.jpeg() + samples.zip_bytes(), "a.jpg", "polyglot"),
        (samples.png() + b"%PDF-1.4 trailer", "a.png", "polyglot"),
        (b"%PDF-1.4\n<html><script>x</script></html>", "a.pdf", "polyglot"),
        (samples.png(), "photo.jpg", "extension"),
        (samples.png(), "photo.png.exe", "extension"),
        (b"%PDF-1.4\n%%EOF", "invoice.png", "extension"),
        (samples.SVG_WITH_SCRIPT, "logo.svg", "markup"),
        (samples.SVG_WITH_SCRIPT, "", "markup"),
        (b"\n  <!DOCTYPE html><html><body>hi</body></html>", "page.txt", "markup"),
        (samples.zip_bytes(), "files.zip", "type"),
        (b"MZ\x90\x00\x03\x00\x00\x00\x04\x00", "tool.exe", "type"),
        (samples.wav()[:30], "a.wav", "truncated"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_bad_files_are_refused_with_a_reason(data, name, code):
    assert _refused(data, name) == code


def test_the_pixel_limit_is_read_from_the_header_before_decoding():
    data = samples.bomb_png()
    assert len(data) < 100_000  # small on disk, 50 megapixels decoded
    assert _refused(data, "") == "pixels"
    assert sniff(samples.png((100, 100)), "", max_pixels=10_000).width == 100
    with pytest.raises(AttachmentRefused):
        sniff(samples.png((101, 100)), "", max_pixels=10_000)


def test_exif_and_gps_are_stripped_and_the_orientation_applied():
    original = samples.jpeg(size=(40, 30), exif=samples.gps_exif())
    assert Image.open(io.BytesIO(original)).getexif().get_ifd(0x8825)
    sniffed = sniff(original, "IMG_0001.JPG", max_pixels=LIMIT)
    assert (sniffed.kind, sniffed.media_type) == ("image", "image/jpeg")
    stored = Image.open(io.BytesIO(sniffed.data))
    assert not stored.getexif() and "exif" not in stored.info
    assert b"PhoneMaker" not in sniffed.data and b"Exif" not in sniffed.data
    # Rotated by its orientation: 40 × 30 stored as seen, 30 × 40.
    assert stored.size == (30, 40) and (sniffed.width, sniffed.height) == (40, 30)


@pytest.mark.parametrize(
    ("data", "name", "kind", "media_type"),
    [
        (samples.png(), "a.PNG", "image", "image/png"),
        (samples.png(), "", "image", "image/png"),
        (samples.jpeg(), "a.jpeg", "image", "image/jpeg"),
        (samples.gif(), "a.gif", "image", "image/gif"),
        (b"%PDF-1.7\n1 0 obj\n%%EOF", "invoice.pdf", "file", "application/pdf"),
        (
            samples.docx(),
            "letter.docx",
            "file",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        ),
        ("订单 1234\n".encode(), "note.txt", "file", "text/plain"),
        (b"a,b\n1,2\n", "sheet.csv", "file", "text/csv"),
        (b'{"a": 1}', "data.json", "file", "application/json"),
        (b"# Title\n", "README.md", "file", "text/markdown"),
        (samples.wav(), "voice.wav", "audio", "audio/wav"),
        (samples.mp3_cbr(), "voice.mp3", "audio", "audio/mpeg"),
        (samples.ogg_opus(), "voice.ogg", "audio", "audio/ogg"),
    ],
    ids=lambda value: value if isinstance(value, str) and value else None,
)
def test_accepted_files_are_typed_from_their_bytes(data, name, kind, media_type):
    sniffed = sniff(data, name, max_pixels=LIMIT)
    assert (sniffed.kind, sniffed.media_type) == (kind, media_type)


def test_audio_durations_from_the_headers():
    assert sniff(samples.wav(seconds=1.5), "", max_pixels=LIMIT).duration_ms == 1500
    # Constant bit rate: the length over the first frame's rate (41,700 bytes at 128 kbit/s).
    assert sniff(samples.mp3_cbr(100), "", max_pixels=LIMIT).duration_ms == 2606
    assert sniff(samples.ogg_opus(seconds=2.0), "", max_pixels=LIMIT).duration_ms == 2000


def test_a_non_image_is_stored_as_uploaded():
    data = b"%PDF-1.7\n%%EOF"
    assert sniff(data, "a.pdf", max_pixels=LIMIT).data == data


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("../../etc/pass\x00wd.txt", "passwd.txt"),
        ("C:\\Users\\me\\photo.jpg", "photo.jpg"),
        ("<script>.png", "_script_.png"),
        ("...hidden", "hidden"),
        ("e\u0301te\u0301.txt", "\u00e9t\u00e9.txt"),
        ("a" * 300 + ".pdf", "a" * 196 + ".pdf"),
        ("", ""),
    ],
)
def test_names_are_cleaned(raw, clean):
    assert name_clean(raw) == clean


def _with_metadata(kind: str) -> tuple[bytes, str]:
    image, out = Image.new("RGB", (20, 20), (1, 2, 3)), io.BytesIO()
    if kind == "png":
        text = PngImagePlugin.PngInfo()
        text.add_text("Comment", "secret-place")
        image.save(out, "PNG", exif=samples.gps_exif(), pnginfo=text)
    elif kind == "webp":
        image.save(out, "WEBP", exif=samples.gps_exif())
    else:
        image.convert("P").save(out, "GIF", comment=b"secret-place")
    return out.getvalue(), f"a.{kind}"


@pytest.mark.parametrize("kind", ["png", "webp", "gif"])
def test_every_image_type_loses_its_metadata(kind):
    data, name = _with_metadata(kind)
    assert b"secret-place" in data or b"PhoneMaker" in data
    stored = sniff(data, name, max_pixels=LIMIT).data
    assert b"secret-place" not in stored and b"PhoneMaker" not in stored


def test_a_phone_cameras_mpo_is_stored_as_the_jpeg_of_its_first_picture():
    first, preview, out = Image.new("RGB", (40, 30), (1, 2, 3)), Image.new("RGB", (20, 15)), io.BytesIO()
    first.save(out, "MPO", save_all=True, append_images=[preview], exif=samples.gps_exif())
    sniffed = sniff(out.getvalue(), "IMG_0002.JPG", max_pixels=LIMIT)
    stored = Image.open(io.BytesIO(sniffed.data))
    assert (sniffed.media_type, stored.format, getattr(stored, "n_frames", 1)) == ("image/jpeg", "JPEG", 1)
    assert b"PhoneMaker" not in sniffed.data
