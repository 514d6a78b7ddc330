"""What an upload is, from its bytes alone: the one decision on what is accepted and refused.

Never the client's Content-Type and never the name: the type is read from the bytes (magic
numbers; Pillow decodes images), and a name whose extension says otherwise is refused. Accepted:

- images: PNG, JPEG (a phone's MPO as the JPEG of its first picture), GIF and WebP (an
  animated WebP as its first frame), decoded by Pillow under a pixel limit (every frame of a GIF
  counted; a decompression bomb is refused before it is decoded) and re-encoded, which drops
  EXIF, GPS, XMP and comments: the stored copy is the one a model or a person sees;
- files: PDF, Word (.docx), Excel (.xlsx), PowerPoint (.pptx) and UTF-8 text (plain, Markdown,
  CSV, JSON);
- audio: WAV and MP3 (duration read from the header), Ogg (Opus or Vorbis; duration from the
  last page), FLAC and M4A (no duration).

Refused: empty and truncated files, images over the pixel limit, polyglots (an image or a file
that is also a zip archive, a PDF, or HTML/SVG markup), markup itself (HTML, SVG, XML: a browser
could render and run it), other archives and executables, and anything else unknown.
Pure: no database, no storage; attachments.services stores what this returns."""

import io
import re
import unicodedata
import zipfile
from dataclasses import dataclass

from django.utils.translation import gettext as _
from PIL import Image, ImageOps, UnidentifiedImageError

from attachments.audio import AudioInvalid, audio_duration_ms
from platform_site.refusals import InputRefused


class AttachmentRefused(InputRefused):
    """Not accepted; `code` names the rule (for tests and logs), the message says why. A 400
    wherever the API meets it (platform_site.refusals)."""


@dataclass(frozen=True)
class Sniffed:
    kind: str  # attachments.models.AttachmentKind
    media_type: str
    data: bytes  # what is stored: an image's re-encoded copy, anything else as uploaded
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None


# Each accepted media type and the extensions a name may have for it.
EXTENSIONS = {
    "image/png": {"png"},
    "image/jpeg": {"jpg", "jpeg", "jpe", "jfif"},
    "image/gif": {"gif"},
    "image/webp": {"webp"},
    "application/pdf": {"pdf"},
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": {"docx"},
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": {"xlsx"},
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": {"pptx"},
    "text/plain": {"txt", "text", "log"},
    "text/markdown": {"md", "markdown"},
    "text/csv": {"csv"},
    "application/json": {"json"},
    "audio/wav": {"wav", "wave"},
    "audio/mpeg": {"mp3"},
    "audio/ogg": {"ogg", "oga", "opus"},
    "audio/flac": {"flac"},
    "audio/mp4": {"m4a"},
}
# MPO: a phone camera's JPEG with a second, smaller picture appended (its preview or depth map);
# read and stored as the JPEG of its first picture.
_PILLOW_FORMATS = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "MPO": "image/jpeg",
    "GIF": "image/gif",
    "WEBP": "image/webp",
}
# Formats whose every frame is stored (animations); of the others only the first is decoded.
_ANIMATED = {"GIF"}
_OFFICE = {
    "word/document.xml": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xl/workbook.xml": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "ppt/presentation.xml": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}
# Markup a browser may render (and run) or another reader may take: in an image anywhere, in
# anything else at its start, where browsers and readers look.
_MARKUP = re.compile(rb"<(?:!doctype|html|head|body|script|svg|iframe|object|embed|\?xml|\?php)[\s>/]", re.I)
_MARKUP_HEAD_BYTES = 1024
# Text: a UTF-8 file whose name says which kind; no name or another name, plain text.
_TEXT_TYPES = {ext: media for media, exts in EXTENSIONS.items() if media.startswith("text/") for ext in exts}
_TEXT_TYPES["json"] = "application/json"
_NAME_DROP = re.compile(r'[<>:"|?*\\/]')
NAME_MAX_CHARS = 200


def name_clean(name: str) -> str:
    """The name to keep: its last path segment, NFC, without control characters or characters
    file systems and headers choke on, no leading dots (no hidden files), at most
    NAME_MAX_CHARS keeping its extension."""
    name = unicodedata.normalize("NFC", str(name or "")).replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if ch.isprintable())
    name = _NAME_DROP.sub("_", name).strip().lstrip(".").strip()
    if len(name) > NAME_MAX_CHARS:
        stem, dot, ext = name.rpartition(".")
        ext = ext[:16] if dot else ""
        name = (stem if dot else name)[: NAME_MAX_CHARS - len(ext) - 1] + ("." + ext if ext else "")
    return name


def _extension(name: str) -> str:
    stem, dot, ext = name.rpartition(".")
    return ext.lower() if dot and stem else ""


def _is_zip(data: bytes) -> bool:
    # zipfile finds the end-of-central-directory record from the end, as unzip does: a file
    # with a zip appended is one, whatever comes first.
    try:
        return zipfile.is_zipfile(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - a malformed record is not a zip
        return False


def _polyglot_refused(data: bytes, *, whole: bool) -> None:
    if _is_zip(data):
        raise AttachmentRefused("polyglot", _("The file is also a zip archive; such files are not accepted."))
    scanned = data if whole else data[:_MARKUP_HEAD_BYTES]
    if _MARKUP.search(scanned):
        raise AttachmentRefused("polyglot", _("The file also holds HTML or SVG markup; such files are not accepted."))
    if whole and b"%PDF-" in data:
        raise AttachmentRefused("polyglot", _("The file is also a PDF; such files are not accepted."))


def _image(data: bytes, *, max_pixels: int) -> Sniffed:
    try:
        with Image.open(io.BytesIO(data)) as image:
            media_type = _PILLOW_FORMATS.get(image.format or "")
            if media_type is None:
                raise AttachmentRefused(
                    "type", _("Images must be PNG, JPEG, GIF or WebP; this is %(format)s.") % {"format": image.format}
                )
            width, height = image.size
            frames = getattr(image, "n_frames", 1) if image.format in _ANIMATED else 1
            # Checked on the header, before a pixel is decoded: that is what a bomb is.
            if width * height * frames > max_pixels:
                raise AttachmentRefused(
                    "pixels",
                    _("The image has %(pixels)s pixels (all frames); at most %(limit)s are accepted.")
                    % {"pixels": width * height * frames, "limit": max_pixels},
                )
            stored = _reencoded(image, media_type, frames)
    except AttachmentRefused:
        raise
    except Image.DecompressionBombError:
        raise AttachmentRefused("pixels", _("The image is too large to decode.")) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError):
        raise AttachmentRefused("truncated", _("The image is truncated or damaged and cannot be decoded.")) from None
    _polyglot_refused(data, whole=True)
    return Sniffed(kind="image", media_type=media_type, data=stored, width=width, height=height)


def _reencoded(image: Image.Image, media_type: str, frames: int) -> bytes:
    """The image decoded and written again with no metadata: EXIF (GPS with it), XMP, text
    chunks and comments are not copied. A JPEG's orientation is applied to the pixels first, so
    the picture still stands the right way up without its EXIF."""
    out = io.BytesIO()
    icc = image.info.get("icc_profile")
    if media_type == "image/gif":
        image.info.pop("comment", None)
        image.info.pop("extension", None)
        image.save(out, "GIF", save_all=frames > 1)
        return out.getvalue()
    image.load()
    if media_type == "image/jpeg":
        image = ImageOps.exif_transpose(image)
        if image.mode not in ("RGB", "L", "CMYK"):
            image = image.convert("RGB")
        image.save(out, "JPEG", quality=90, icc_profile=icc)
    elif media_type == "image/png":
        image.save(out, "PNG", icc_profile=icc)
    else:
        image.save(out, "WEBP", quality=90, icc_profile=icc)
    return out.getvalue()


def _office(data: bytes) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        raise AttachmentRefused("truncated", _("The archive is damaged.")) from None
    if "[Content_Types].xml" in names:
        for part, media_type in _OFFICE.items():
            if part in names:
                return media_type
    raise AttachmentRefused("type", _("Archives are not accepted; send the files themselves."))


def _text(data: bytes, ext: str) -> str | None:
    if b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _MARKUP.search(text[:_MARKUP_HEAD_BYTES].lstrip("\ufeff \t\r\n").encode()):
        raise AttachmentRefused("markup", _("HTML, SVG and XML files are not accepted."))
    return _TEXT_TYPES.get(ext, "text/plain")


def _audio_type(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0 and data[1] & 0x06 == 0x02):
        return "audio/mpeg"
    if data[:4] == b"OggS":
        return "audio/ogg"
    if data[:4] == b"fLaC":
        return "audio/flac"
    if data[4:8] == b"ftyp" and data[8:12] in (b"M4A ", b"M4B "):
        return "audio/mp4"
    return None


def sniff(data: bytes, name: str, *, max_pixels: int) -> Sniffed:
    """What `data` is (see the module's docstring), or AttachmentRefused saying why not.
    `name` is the sanitised name (name_clean); its extension, if any, must fit the type."""
    if not data:
        raise AttachmentRefused("empty", _("The file is empty."))
    ext = _extension(name)
    head = data[:16]
    if head.startswith((b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")) or (
        head[:4] == b"RIFF" and head[8:12] == b"WEBP"
    ):
        sniffed = _image(data, max_pixels=max_pixels)
    elif head.startswith(b"%PDF-"):
        _polyglot_refused(data, whole=False)
        sniffed = Sniffed(kind="file", media_type="application/pdf", data=data)
    elif head.startswith(b"PK\x03\x04"):
        sniffed = Sniffed(kind="file", media_type=_office(data), data=data)
    elif (media_type := _audio_type(data)) is not None:
        _polyglot_refused(data, whole=False)
        try:
            duration = audio_duration_ms(data, media_type)
        except AudioInvalid:
            raise AttachmentRefused("truncated", _("The audio file is truncated or damaged.")) from None
        sniffed = Sniffed(kind="audio", media_type=media_type, data=data, duration_ms=duration)
    elif (media_type := _text(data, ext)) is not None:
        _polyglot_refused(data, whole=False)
        sniffed = Sniffed(kind="file", media_type=media_type, data=data)
    else:
        raise AttachmentRefused(
            "type",
            _(
                "This kind of file is not accepted: send an image (PNG, JPEG, GIF, WebP), a PDF, an office document, "
                "text or audio (WAV, MP3, Ogg, FLAC, M4A)."
            ),
        )
    if ext and ext not in EXTENSIONS[sniffed.media_type]:
        raise AttachmentRefused(
            "extension",
            _("The name ends in .%(ext)s but the file is %(media_type)s; rename it or send the right file.")
            % {"ext": ext, "media_type": sniffed.media_type},
        )
    return sniffed
