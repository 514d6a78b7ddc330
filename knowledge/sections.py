"""A document's text in sections, each with where it is in the file: a PDF's page, a slide, a
sheet's rows, a Word heading. The location stays with every chunk cut from the section, so a
citation says where the passage is ("page 3", "slide 2", "sheet Prices, rows 1–12")."""

from dataclasses import dataclass, field

from django.utils.translation import gettext as _


@dataclass
class Section:
    text: str
    # {"page": 3} | {"slide": 2} | {"sheet": "Prices", "rows": [1, 12]} | {"rows": [1, 40]} |
    # {"heading": "Returns"} | {} (the whole file)
    location: dict = field(default_factory=dict)
    # A table's header row: every chunk of the section starts with it (knowledge.chunking).
    header: str = ""


def location_label(location: dict | None) -> str:
    """How a citation names the location, "" for a whole file."""
    if not location:
        return ""
    if "page" in location:
        return _("page %(n)s") % {"n": location["page"]}
    if "slide" in location:
        return _("slide %(n)s") % {"n": location["slide"]}
    if "rows" in location:
        first, last = location["rows"]
        rows = (
            _("row %(n)s") % {"n": first}
            if first == last
            else _("rows %(first)s–%(last)s") % {"first": first, "last": last}
        )
        return (
            _("sheet %(sheet)s, %(rows)s") % {"sheet": location["sheet"], "rows": rows} if "sheet" in location else rows
        )
    if "heading" in location:
        return _("section “%(heading)s”") % {"heading": location["heading"]}
    return ""


def sections_join(sections: list[Section]) -> str:
    """The document's text: its sections, each with its header, a blank line between them."""
    return "\n\n".join(section_text(section) for section in sections)


def section_text(section: Section) -> str:
    return f"{section.header}\n{section.text}" if section.header else section.text


def sections_outline(sections: list[Section]) -> list[dict]:
    """What Document.sections keeps, so re-indexing the stored text finds the sections again."""
    return [{"location": s.location, "header": s.header, "chars": len(section_text(s))} for s in sections]


def sections_from_outline(text: str, outline: list[dict]) -> list[Section]:
    """The sections of a stored text, or the whole text as one when the outline does not fit it
    (the text was edited since it was read)."""
    if not outline or sum(part["chars"] for part in outline) + 2 * (len(outline) - 1) != len(text):
        return [Section(text)]
    sections, start = [], 0
    for part in outline:
        piece = text[start : start + part["chars"]]
        start += part["chars"] + 2
        header = part.get("header", "")
        if header:
            if not piece.startswith(header + "\n") and piece != header:
                return [Section(text)]
            piece = piece[len(header) + 1 :]
        sections.append(Section(piece, part.get("location") or {}, header))
    return sections
