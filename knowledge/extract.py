"""The text of an uploaded file or a fetched page: plain text, Markdown, HTML or PDF."""

import io

from django.utils.translation import gettext as _
from pypdf import PdfReader
from pypdf.errors import PdfReadError

from platform_site.outbound import OutboundBlocked, guarded_request
from tools.html_text import html_to_text

MAX_BYTES = 20_000_000


class ExtractionFailed(ValueError):
    pass


def _decode(data: bytes) -> str:
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise ExtractionFailed(_("The file is not UTF-8 or GB18030 text."))


def _pdf(data: bytes) -> str:
    try:
        reader = PdfReader(io.BytesIO(data))
        return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise ExtractionFailed(_("The PDF cannot be read: %(error)s") % {"error": exc}) from exc


def text_from_bytes(data: bytes, *, filename: str = "", content_type: str = "") -> tuple[str, str]:
    """(title found in the content or "", text). The kind is read from the name or the type."""
    name, kind = filename.lower(), content_type.split(";")[0].strip().lower()
    if name.endswith(".pdf") or kind == "application/pdf" or data.startswith(b"%PDF-"):
        text = _pdf(data)
        title = ""
    elif name.endswith((".html", ".htm")) or kind in ("text/html", "application/xhtml+xml"):
        title, text = html_to_text(_decode(data))
    elif name.endswith((".txt", ".md", ".markdown")) or kind.startswith("text/") or "." not in name.rsplit("/", 1)[-1]:
        title, text = "", _decode(data)
    else:
        raise ExtractionFailed(_("Upload text, Markdown, HTML or PDF files."))
    text = text.replace("\x00", "")
    if not text.strip():
        raise ExtractionFailed(_("No text was found in the document."))
    return title, text


def text_from_url(url: str) -> tuple[str, str]:
    """Fetch through the outbound guard (public addresses only, as for HTTP tools)."""
    try:
        fetched = guarded_request("GET", url, max_bytes=MAX_BYTES, timeout_seconds=30)
    except OutboundBlocked as exc:
        raise ExtractionFailed(_("The URL was refused: %(reason)s") % {"reason": exc.detail}) from exc
    except Exception as exc:  # transport failures of any kind are the operator's to read
        raise ExtractionFailed(_("The URL could not be fetched: %(error)s") % {"error": exc}) from exc
    if fetched.response.status_code >= 400:
        raise ExtractionFailed(_("The URL answered HTTP %(status)s.") % {"status": fetched.response.status_code})
    if fetched.truncated:
        raise ExtractionFailed(_("The document is larger than %(n)s bytes.") % {"n": MAX_BYTES})
    path = fetched.response.url.path if fetched.response.url else url
    return text_from_bytes(fetched.body, filename=path, content_type=fetched.response.headers.get("content-type", ""))
