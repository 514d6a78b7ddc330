"""The text of an uploaded file or a fetched page: plain text, Markdown, HTML or PDF.

`file_kind` is the cheap check an upload form makes (name, type, first bytes). `text_from_bytes`
parses, which an untrusted file can make arbitrarily slow or large: it runs on the worker, in a
child process with limits (knowledge.parsing), never in the web process.
"""

import io
import re

from django.conf import settings
from django.utils.translation import gettext as _
from pypdf import PdfReader
from pypdf.errors import LimitReachedError

from platform_site.outbound import OutboundBlocked, guarded_request
from tools.html_text import html_to_text

PDF, HTML, MARKDOWN, TEXT = "pdf", "html", "markdown", "text"

_HEADING = re.compile(r"#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"(```|~~~)")


class ExtractionFailed(ValueError):
    pass


def file_kind(*, filename: str, content_type: str, head: bytes) -> str:
    """PDF, HTML, MARKDOWN or TEXT, from the name, the declared type or the first bytes."""
    name, kind = filename.lower(), content_type.split(";")[0].strip().lower()
    if name.endswith(".pdf") or kind == "application/pdf" or head.startswith(b"%PDF-"):
        return PDF
    if name.endswith((".html", ".htm")) or kind in ("text/html", "application/xhtml+xml"):
        return HTML
    if name.endswith((".md", ".markdown")) or kind == "text/markdown":
        return MARKDOWN
    if name.endswith(".txt") or kind.startswith("text/") or "." not in name.rsplit("/", 1)[-1]:
        return TEXT
    raise ExtractionFailed(_("Upload text, Markdown, HTML or PDF files."))


def _decode(data: bytes) -> str:
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise ExtractionFailed(_("The file is not UTF-8 or GB18030 text."))


def markdown_title(text: str) -> str:
    """The first level-one heading (`# Title`) outside code blocks, or ""."""
    fenced = False
    for line in text.splitlines():
        stripped = line.strip()
        if _FENCE.match(stripped):
            fenced = not fenced
        elif not fenced and (match := _HEADING.fullmatch(stripped)):
            return match.group(1).strip()
    return ""


def _pdf(data: bytes) -> str:
    try:
        reader = PdfReader(io.BytesIO(data))
        return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
    except LimitReachedError as exc:
        raise ExtractionFailed(
            _("The PDF holds a stream that inflates past the parser's limit (a decompression bomb): %(error)s")
            % {"error": exc}
        ) from exc
    except Exception as exc:  # pypdf raises many kinds on malformed files; each is the file's fault
        raise ExtractionFailed(
            _("The PDF cannot be read: %(error)s") % {"error": str(exc) or type(exc).__name__}
        ) from exc


def text_from_bytes(data: bytes, *, filename: str = "", content_type: str = "") -> tuple[str, str]:
    """(title found in the content or "", text)."""
    kind = file_kind(filename=filename, content_type=content_type, head=data[:8])
    title = ""
    if kind == PDF:
        text = _pdf(data)
    elif kind == HTML:
        title, text = html_to_text(_decode(data))
    else:
        text = _decode(data)
        if kind == MARKDOWN:
            title = markdown_title(text)
    text = text.replace("\x00", "")
    if not text.strip():
        raise ExtractionFailed(_("No text was found in the document."))
    return title, text


def url_fetch(url: str) -> tuple[bytes, str, str]:
    """(body, path, content type) of the URL, fetched through the outbound guard (public
    addresses only, as for HTTP tools). The body is parsed like an upload, with its limits."""
    max_bytes = settings.AGENTRY_KNOWLEDGE_MAX_FILE_BYTES
    try:
        fetched = guarded_request("GET", url, max_bytes=max_bytes, timeout_seconds=30)
    except OutboundBlocked as exc:
        raise ExtractionFailed(_("The URL was refused: %(reason)s") % {"reason": exc.detail}) from exc
    except Exception as exc:  # transport failures of any kind are the operator's to read
        raise ExtractionFailed(_("The URL could not be fetched: %(error)s") % {"error": exc}) from exc
    if fetched.response.status_code >= 400:
        raise ExtractionFailed(_("The URL answered HTTP %(status)s.") % {"status": fetched.response.status_code})
    if fetched.truncated:
        raise ExtractionFailed(_("The document is larger than %(n)s bytes.") % {"n": max_bytes})
    path = fetched.response.url.path if fetched.response.url else url
    return fetched.body, path, fetched.response.headers.get("content-type", "")
