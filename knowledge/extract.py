"""The text of an uploaded file or a fetched page, in sections with their locations: plain text,
Markdown, HTML, CSV, PDF (its text layer, and OCR for a page without one), Word, Excel,
PowerPoint, and PNG or JPEG images (OCR).

`file_kind` is the cheap check an upload form makes (name, type, first bytes). `sections_from_bytes`
parses, which an untrusted file can make arbitrarily slow or large: it runs on the worker, in a
child process with limits (knowledge.parsing), never in the web process. There the kind is read
from the content (a zip container's [Content_Types].xml, an image's signature), and a name that
says otherwise is refused.
"""

import io
import re

from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from pypdf import PdfReader
from pypdf.errors import LimitReachedError

from knowledge.ocr import OcrFailed, image_open, image_text, pixels_check
from knowledge.office import DOCX, PPTX, XLSX, container_kind, docx_sections, pptx_sections
from knowledge.sections import Section
from knowledge.tables import csv_sections, xlsx_sections
from platform_site.outbound import OutboundBlocked, guarded_request
from tools.html_text import html_to_text

PDF, HTML, MARKDOWN, TEXT, CSV, IMAGE = "pdf", "html", "markdown", "text", "csv", "image"
# A zip container, an Office file by its name: which one its content decides (knowledge.office).
OFFICE = "office"

_HEADING = re.compile(r"#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"(```|~~~)")
_BY_NAME = {
    ".pdf": PDF,
    ".docx": DOCX,
    ".docm": DOCX,
    ".xlsx": XLSX,
    ".xlsm": XLSX,
    ".pptx": PPTX,
    ".pptm": PPTX,
    ".png": IMAGE,
    ".jpg": IMAGE,
    ".jpeg": IMAGE,
    ".csv": CSV,
    ".tsv": CSV,
    ".html": HTML,
    ".htm": HTML,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".txt": TEXT,
}
_NAMES = {
    PDF: "PDF",
    DOCX: "Word (.docx)",
    XLSX: "Excel (.xlsx)",
    PPTX: "PowerPoint (.pptx)",
    IMAGE: gettext_lazy("PNG or JPEG image"),
}


class ExtractionFailed(ValueError):
    pass


def _by_content(head: bytes) -> str:
    if head.startswith(b"%PDF-"):
        return PDF
    if head.startswith(b"PK\x03\x04"):
        return OFFICE
    if head.startswith((b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")):
        return IMAGE
    if head.startswith(b"\xd0\xcf\x11\xe0"):
        raise ExtractionFailed(
            _("The file is an older Office format (.doc, .xls, .ppt); save it as .docx, .xlsx or .pptx.")
        )
    return ""


def _by_name(filename: str) -> str:
    name = filename.lower().rsplit("/", 1)[-1]
    return next((kind for suffix, kind in _BY_NAME.items() if name.endswith(suffix)), "")


def file_kind(*, filename: str, content_type: str, head: bytes) -> str:
    """PDF, OFFICE (docx, xlsx or pptx by the name: the container decides), IMAGE, CSV, HTML,
    MARKDOWN or TEXT, from the first bytes, then the name, then the declared type. A binary kind
    the name claims and the first bytes deny is refused."""
    named, kind = _by_name(filename), content_type.split(";")[0].strip().lower()
    found = _by_content(head)
    if found:
        if found == OFFICE:
            return OFFICE
        if named in (DOCX, XLSX, PPTX) or (named in (PDF, IMAGE) and named != found):
            raise ExtractionFailed(_mismatch(filename, found))
        return found
    if named in (PDF, DOCX, XLSX, PPTX, IMAGE):
        if head:
            raise ExtractionFailed(
                _("The file is named %(name)s but its content is not a %(kind)s file.")
                % {"name": filename.rsplit("/", 1)[-1], "kind": _NAMES[named]}
            )
        return OFFICE if named in (DOCX, XLSX, PPTX) else named
    if named:
        return named
    if kind == "application/pdf":
        return PDF
    if kind in ("text/html", "application/xhtml+xml"):
        return HTML
    if kind == "text/markdown":
        return MARKDOWN
    if kind == "text/csv":
        return CSV
    if kind.startswith("text/") or "." not in filename.rsplit("/", 1)[-1]:
        return TEXT
    raise ExtractionFailed(
        _("Upload text, Markdown, HTML, CSV, PDF, Word (.docx), Excel (.xlsx), PowerPoint (.pptx) or PNG/JPEG files.")
    )


def _mismatch(filename: str, found: str) -> str:
    return _("The file is named %(name)s but its content is a %(kind)s file.") % {
        "name": filename.rsplit("/", 1)[-1],
        "kind": _NAMES[found],
    }


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


def _page_scan(page) -> str:
    """The text of a page without a text layer: its images, read by OCR in order (a scanner
    stores a page as one image). Each image's size is checked before any is decoded."""
    images = []
    for _name, ref in (page.get("/Resources") or {}).get("/XObject", {}).items():
        xobject = ref.get_object()
        if xobject.get("/Subtype") == "/Image":
            pixels_check(int(xobject.get("/Width", 0)), int(xobject.get("/Height", 0)))
            images.append(xobject)
    if not images:
        return ""
    texts = [image_text(image.image) for image in page.images]
    return "\n".join(text for text in texts if text)


def _pdf(data: bytes) -> list[Section]:
    try:
        reader = PdfReader(io.BytesIO(data))
        sections, scanned = [], 0
        for number, page in enumerate(reader.pages, start=1):
            text = (page.extract_text() or "").strip()
            if not text:
                scanned += 1
                if scanned > settings.AGENTRY_KNOWLEDGE_OCR_MAX_PAGES:
                    raise ExtractionFailed(
                        _("The PDF has more than %(n)s pages without a text layer to read by OCR.")
                        % {"n": settings.AGENTRY_KNOWLEDGE_OCR_MAX_PAGES}
                    )
                text = _page_scan(page).strip()
            if text:
                sections.append(Section(text, {"page": number}))
        return sections
    except (ExtractionFailed, OcrFailed):
        raise
    except LimitReachedError as exc:
        raise ExtractionFailed(
            _("The PDF holds a stream that inflates past the parser's limit (a decompression bomb): %(error)s")
            % {"error": exc}
        ) from exc
    except Exception as exc:  # pypdf raises many kinds on malformed files; each is the file's fault
        raise ExtractionFailed(
            _("The PDF cannot be read: %(error)s") % {"error": str(exc) or type(exc).__name__}
        ) from exc


def _office(data: bytes, filename: str) -> tuple[str, list[Section]]:
    kind = container_kind(data)
    named = _by_name(filename)
    if named and named != kind:
        raise ExtractionFailed(_mismatch(filename, kind))
    reader = {DOCX: docx_sections, XLSX: xlsx_sections, PPTX: pptx_sections}[kind]
    try:
        return reader(data)
    except (MemoryError, ExtractionFailed):
        raise
    except Exception as exc:  # the parsers raise many kinds on a damaged file; each is the file's fault
        raise ExtractionFailed(
            _("The %(kind)s file cannot be read: %(error)s")
            % {"kind": _NAMES[kind], "error": str(exc) or type(exc).__name__}
        ) from exc


def sections_from_bytes(data: bytes, *, filename: str = "", content_type: str = "") -> tuple[str, list[Section]]:
    """(title found in the content or "", sections of text with their locations)."""
    if not data:
        raise ExtractionFailed(_("The file is empty."))
    kind = file_kind(filename=filename, content_type=content_type, head=data[:8])
    title = ""
    try:
        if kind == PDF:
            sections = _pdf(data)
        elif kind == OFFICE:
            title, sections = _office(data, filename)
        elif kind == IMAGE:
            sections = [Section(image_text(image_open(data)))]
        elif kind == CSV:
            sections = csv_sections(_decode(data))
        elif kind == HTML:
            title, text = html_to_text(_decode(data))
            sections = [Section(text)]
        else:
            text = _decode(data)
            title = markdown_title(text) if kind == MARKDOWN else ""
            sections = [Section(text)]
    except ExtractionFailed:
        raise
    except ValueError as exc:  # the readers' own (ContainerError, OcrFailed, a CSV error): the file's
        raise ExtractionFailed(str(exc)) from exc
    for section in sections:
        section.text = section.text.replace("\x00", "")
        section.header = section.header.replace("\x00", "")
    sections = [section for section in sections if section.text.strip() or section.header.strip()]
    if not sections:
        raise ExtractionFailed(_("No text was found in the document."))
    return title, sections


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
