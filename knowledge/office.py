"""Word (.docx) and PowerPoint (.pptx) files, and the zip container all three Office formats are.

The kind is read from the container's [Content_Types].xml (the main part's content type), not
from the file's name. The container's directory is checked before anything is inflated: a file
declaring more entries or more uncompressed bytes than the limits (a zip bomb) is refused, and
since Python's zipfile never returns more than an entry declares, the declared sizes bound what
the parsers can inflate.
"""

import io
import re
import zipfile

from django.conf import settings
from django.utils.translation import gettext as _

from knowledge.sections import Section

# The parsers are imported where a file is read (the limited child of knowledge.parsing): the
# web process, which only checks an upload's kind, never loads them.

DOCX, XLSX, PPTX = "docx", "xlsx", "pptx"

_MAIN_TYPES = {
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml": DOCX,
    "application/vnd.ms-word.document.macroEnabled.main+xml": DOCX,
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml": XLSX,
    "application/vnd.ms-excel.sheet.macroEnabled.main+xml": XLSX,
    "application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml": PPTX,
    "application/vnd.ms-powerpoint.presentation.macroEnabled.main+xml": PPTX,
}
_CONTENT_TYPE = re.compile(rb'ContentType="([^"]+)"')
# [Content_Types].xml lists a handful of types; a larger one is not an Office file's.
_CONTENT_TYPES_MAX_BYTES = 1_000_000


class ContainerError(ValueError):
    pass


def container_kind(data: bytes) -> str:
    """DOCX, XLSX or PPTX: the Office format the zip container holds. Raises ContainerError when
    it is not a readable Office file or passes the zip limits."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise ContainerError(
            _("The file is not a readable zip container (a truncated or damaged file?): %(error)s") % {"error": exc}
        ) from exc
    max_entries, max_bytes = settings.AGENTRY_KNOWLEDGE_ZIP_MAX_ENTRIES, settings.AGENTRY_KNOWLEDGE_ZIP_MAX_BYTES
    if len(entries) > max_entries:
        raise ContainerError(
            _("The file holds %(count)s entries, more than the limit of %(n)s (a zip bomb?).")
            % {"count": len(entries), "n": max_entries}
        )
    inflated = sum(entry.file_size for entry in entries)
    if inflated > max_bytes:
        raise ContainerError(
            _("The file inflates to %(size)s bytes, more than the limit of %(n)s (a zip bomb?).")
            % {"size": inflated, "n": max_bytes}
        )
    try:
        info = archive.getinfo("[Content_Types].xml")
    except KeyError:
        raise ContainerError(
            _("The zip file is not a Word, Excel or PowerPoint document (it has no [Content_Types].xml).")
        ) from None
    if info.file_size > _CONTENT_TYPES_MAX_BYTES:
        raise ContainerError(_("The file's [Content_Types].xml is too large for an Office document."))
    try:
        types = archive.read(info)
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as exc:
        raise ContainerError(_("The file is damaged: %(error)s") % {"error": exc}) from exc
    for content_type in _CONTENT_TYPE.findall(types):
        kind = _MAIN_TYPES.get(content_type.decode("ascii", "replace"))
        if kind:
            return kind
    raise ContainerError(_("The zip file is not a Word, Excel or PowerPoint document."))


def _cells(row) -> str:
    # python-docx lists a merged cell once per grid column it spans, as the same object.
    cells = list(row.cells)
    texts = [" ".join(cell.text.split()) for cell in {id(cell): cell for cell in cells}.values()]
    return " | ".join(texts) if any(texts) else ""


def _table(rows) -> str:
    """A table's rows, a line each (empty rows left out)."""
    return "\n".join(line for line in (_cells(row) for row in rows) if line)


def docx_sections(data: bytes) -> tuple[str, list[Section]]:
    """(title, sections): the body's paragraphs and tables in order, a section per heading (Word
    has no pages: a heading is the nearest thing a citation can name)."""
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    title = (document.core_properties.title or "").strip()
    sections: list[Section] = []
    heading, lines = "", []

    def close():
        text = "\n".join(lines).strip()
        if text:
            sections.append(Section(text, {"heading": heading[:200]} if heading else {}))

    for block in document.iter_inner_content():
        if isinstance(block, Table):
            lines.append(_table(block.rows))
            continue
        text = block.text.strip()
        style = (block.style.name if block.style is not None else "") or ""
        if text and style == "Title":
            title = title or text
            lines.append(text)
        elif text and style.startswith("Heading"):
            title = title or (text if style == "Heading 1" else "")
            close()
            heading, lines = text, [text]
        elif text:
            lines.append(text)
    close()
    return title[:300], sections


def _shape_texts(shapes) -> list[str]:
    texts = []
    for shape in shapes:
        if shape.shape_type == 6:  # a group: its shapes, in order (MSO_SHAPE_TYPE.GROUP)
            texts.extend(_shape_texts(shape.shapes))
        elif getattr(shape, "has_table", False) and shape.has_table:
            texts.append(_table(shape.table.rows))
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame and shape.text_frame.text.strip():
            texts.append(shape.text_frame.text.strip())
    return texts


def pptx_sections(data: bytes) -> tuple[str, list[Section]]:
    """(title, sections): one section per slide, its shapes' text then its speaker notes."""
    import pptx

    presentation = pptx.Presentation(io.BytesIO(data))
    title = (presentation.core_properties.title or "").strip()
    sections = []
    for number, slide in enumerate(presentation.slides, start=1):
        texts = _shape_texts(slide.shapes)
        if not title and slide.shapes.title is not None and slide.shapes.title.text.strip():
            title = slide.shapes.title.text.strip()
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                texts.append(_("Notes: %(notes)s") % {"notes": notes})
        if texts:
            sections.append(Section("\n".join(texts), {"slide": number}))
    return title[:300], sections
