"""Excel (.xlsx) and CSV files as tables: a section per region, a region being a run of
non-empty rows (blank rows separate them), its first row the header every chunk repeats."""

import csv
import datetime
import io

from django.utils.translation import gettext as _

from knowledge.sections import Section

_SEPARATOR = " | "


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return " ".join(str(value).split())


def _regions(rows, location) -> list[Section]:
    """`rows` are (row number, cell texts); a section per region, located by `location(first, last)`."""
    sections, region = [], []

    def close():
        if not region:
            return
        # Columns empty in every row of the region (a sheet's unused width) are dropped.
        width = max(i + 1 for _number, cells in region for i, cell in enumerate(cells) if cell)
        lines = [_SEPARATOR.join(cells[:width]) for _number, cells in region]
        where = location(region[0][0], region[-1][0])
        if len(lines) == 1:
            sections.append(Section(lines[0], where))
        else:
            sections.append(Section("\n".join(lines[1:]), where, header=lines[0]))
        region.clear()

    for number, cells in rows:
        if any(cells):
            region.append((number, cells))
        else:
            close()
    close()
    return sections


def xlsx_sections(data: bytes) -> tuple[str, list[Section]]:
    """(title, sections) of a workbook: its sheets' regions, with the cells' values as last
    computed by Excel (formulas are not evaluated here)."""
    import openpyxl  # in the child that reads the file only (knowledge.office)

    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        title = (workbook.properties.title or "").strip()
        sections = []
        for sheet in workbook.worksheets:
            rows = (
                (number, [_cell(value) for value in values])
                for number, values in enumerate(sheet.iter_rows(values_only=True), start=1)
            )
            sections.extend(
                _regions(rows, lambda first, last, name=sheet.title: {"sheet": name, "rows": [first, last]})
            )
    finally:
        workbook.close()
    return title[:300], sections


def csv_sections(text: str) -> list[Section]:
    """The regions of a CSV file's text (already decoded), its dialect sniffed from the start
    (comma, semicolon, tab or bar)."""
    sample = text[:8192]
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect)
    try:
        rows = [(number, [_cell(value) for value in values]) for number, values in enumerate(reader, start=1)]
    except csv.Error as exc:
        raise ValueError(_("The CSV file cannot be read: %(error)s") % {"error": exc}) from exc
    return _regions(rows, lambda first, last: {"rows": [first, last]})
