"""Office files, CSV and scans read into sections with their locations (knowledge.extract),
in this process: the limited child that runs them on the worker is the database tier's."""

import io
import zipfile

import pytest

from knowledge.chunking import chunk_rows, chunk_sections
from knowledge.extract import OFFICE, ExtractionFailed, file_kind, sections_from_bytes
from knowledge.format_set import format_documents, scan_pdf, scan_png
from knowledge.sections import Section, location_label, sections_from_outline, sections_join, sections_outline

DOCUMENTS = {name: data for _format, name, data in format_documents()}


def _sections(name: str, data: bytes | None = None):
    return sections_from_bytes(DOCUMENTS[name] if data is None else data, filename=name)


def test_a_word_file_is_cut_at_its_headings_with_its_tables():
    title, sections = _sections("gift-cards.docx")
    assert title == "Gift cards 礼品卡"
    assert [s.location for s in sections] == [{}, {"heading": "Validity"}, {"heading": "挂失"}]
    assert "valid for three years" in sections[1].text
    assert "面值 Value | 价格 Price\n100 | 95" in sections[2].text
    assert location_label(sections[2].location) == "section “挂失”"


def test_a_workbook_is_a_section_per_sheet_region_with_its_header_row():
    title, sections = _sections("shipping-rates.xlsx")
    assert [(s.location, s.header) for s in sections] == [
        ({"sheet": "运费 Shipping", "rows": [1, 4]}, "地区 Region | 承运商 Carrier | 时效 Days | 运费 Fee (CNY)"),
        ({"sheet": "运费 Shipping", "rows": [6, 6]}, ""),
    ]
    assert sections[0].text.splitlines()[0] == "新疆 Xinjiang | EMS | 5-7 | 25"
    assert location_label(sections[0].location) == "sheet 运费 Shipping, rows 1–4"
    assert location_label(sections[1].location) == "sheet 运费 Shipping, row 6"


def test_every_chunk_of_a_long_region_repeats_the_header_row():
    header = "城市 | 电话"
    chunks = chunk_rows(header, [f"城市{i} | 400-{i:04d}" for i in range(40)], size=60)
    assert len(chunks) > 5 and all(c.startswith(header + "\n") and len(c) <= 60 for c in chunks)
    assert sum(c.count("\n") for c in chunks) == 40
    located = chunk_sections([Section("a | b\nc | d", {"rows": [1, 3]}, header="x | y")], size=500, overlap=0)
    assert located == [({"rows": [1, 3]}, "x | y\na | b\nc | d")]


def test_a_presentation_is_a_section_per_slide_with_its_notes():
    title, sections = _sections("loyalty-training.pptx")
    assert title == "积分规则 Points"
    assert [s.location for s in sections] == [{"slide": 1}, {"slide": 2}]
    assert sections[0].text.endswith("Notes: Points expire at the end of the following year.")
    assert location_label(sections[1].location) == "slide 2"


def test_a_csv_file_in_gbk_with_semicolons_is_read():
    data = DOCUMENTS["courier-contacts-gbk.csv"]
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    _title, [section] = _sections("courier-contacts-gbk.csv")
    assert section.header == "快递公司 | 客服电话 | 说明"
    assert section.text.splitlines() == [
        "顺丰速运 | 95338 | 生鲜订单只走顺丰冷链",
        "中通快递 | 95311 | 大件家具由中通配送",
    ]
    assert section.location == {"rows": [1, 3]}


def test_the_outline_gives_back_the_sections_of_the_stored_text():
    _title, sections = _sections("shipping-rates.xlsx")
    text = sections_join(sections)
    assert sections_from_outline(text, sections_outline(sections)) == sections
    # Edited since: the whole text, one section.
    assert sections_from_outline(text + "!", sections_outline(sections)) == [Section(text + "!")]


def test_ocr_reads_the_chinese_and_english_of_a_scanned_page():
    _title, [section] = sections_from_bytes(
        scan_png(["退货地址：苏州工业园区", "Return address: Suzhou Industrial Park"]), filename="scan.png"
    )
    assert "苏州工业园区" in section.text and "Suzhou Industrial Park" in section.text
    assert section.location == {}


def test_a_scanned_pdf_is_read_page_by_page():
    data = scan_pdf([["第一页 订单号 A123"], ["Page two: refund approved"]])
    _title, sections = sections_from_bytes(data, filename="scan.pdf")
    assert [s.location for s in sections] == [{"page": 1}, {"page": 2}]
    assert "A123" in sections[0].text and "refund approved" in sections[1].text


def _zip(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


def test_a_zip_bomb_is_refused_before_anything_is_inflated(settings):
    settings.AGENTRY_KNOWLEDGE_ZIP_MAX_BYTES = 50_000_000
    data = _zip({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"\0" * 60_000_000})
    assert len(data) < 100_000
    with pytest.raises(ExtractionFailed, match=r"inflates to 60000008 bytes, more than the limit of 50000000"):
        sections_from_bytes(data, filename="bomb.docx")
    settings.AGENTRY_KNOWLEDGE_ZIP_MAX_ENTRIES = 100
    many = _zip({f"x/{i}.xml": b"" for i in range(101)})
    with pytest.raises(ExtractionFailed, match="holds 101 entries, more than the limit of 100"):
        sections_from_bytes(many, filename="many.xlsx")


@pytest.mark.parametrize(
    ("name", "data", "error"),
    [
        ("empty.docx", b"", "The file is empty."),
        ("truncated.docx", DOCUMENTS["warranty-policy.docx"][:5000], "not a readable zip container"),
        ("slides.docx", DOCUMENTS["loyalty-training.pptx"], "named slides.docx but its content is a PowerPoint"),
        ("report.xlsx", b"%PDF-1.4 ...", "named report.xlsx but its content is a PDF"),
        ("scan.png", DOCUMENTS["gift-cards.docx"], "named scan.png but its content is a Word"),
        ("photo.jpg", b"GIF89a not a jpeg", "named photo.jpg but its content is not a PNG or JPEG image"),
        ("archive.docx", _zip({"a.txt": b"hello"}), "not a Word, Excel or PowerPoint document"),
        ("old.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 100, "an older Office format"),
        ("broken.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 50, "The image cannot be read"),
    ],
)
def test_bad_files_are_extraction_errors_with_the_reason(name, data, error):
    with pytest.raises(ExtractionFailed, match=error):
        sections_from_bytes(data, filename=name)


def test_an_empty_workbook_has_no_text():
    import openpyxl

    out = io.BytesIO()
    openpyxl.Workbook().save(out)
    with pytest.raises(ExtractionFailed, match="No text was found in the document."):
        sections_from_bytes(out.getvalue(), filename="empty.xlsx")


def test_an_image_above_the_pixel_limit_is_refused_before_it_is_decoded(settings):
    settings.AGENTRY_KNOWLEDGE_OCR_MAX_PIXELS = 1_000_000
    with pytest.raises(ExtractionFailed, match=r"has 1450800 pixels \(1240×1170\), more than the limit of 1000000"):
        sections_from_bytes(scan_png(["x"] * 15), filename="big.png")


def test_the_upload_check_reads_the_container_not_the_name():
    assert file_kind(filename="a.docx", content_type="", head=b"PK\x03\x04") == OFFICE
    assert file_kind(filename="upload", content_type="application/octet-stream", head=b"PK\x03\x04") == OFFICE
    with pytest.raises(ExtractionFailed, match="named a.docx but its content is a PDF"):
        file_kind(filename="a.docx", content_type="", head=b"%PDF-1.7")


def test_tables_in_slides_and_merged_word_cells_read_once():
    import docx
    import pptx
    from pptx.util import Inches

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(1), Inches(4), Inches(2)).table
    for (row, column), text in {(0, 0): "型号 Model", (0, 1): "价格 Price", (1, 0): "X1", (1, 1): "99"}.items():
        table.cell(row, column).text = text
    out = io.BytesIO()
    deck.save(out)
    _title, [section] = sections_from_bytes(out.getvalue(), filename="deck.pptx")
    assert section.text == "型号 Model | 价格 Price\nX1 | 99" and section.location == {"slide": 1}

    document = docx.Document()
    grid = document.add_table(rows=2, cols=3)
    grid.cell(0, 0).merge(grid.cell(0, 1)).text = "合并 merged"
    grid.cell(0, 2).text = "c"
    out = io.BytesIO()
    document.save(out)
    _title, [section] = sections_from_bytes(out.getvalue(), filename="merged.docx")
    assert section.text == "合并 merged | c"
