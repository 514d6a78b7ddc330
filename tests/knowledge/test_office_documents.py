"""Word, Excel, PowerPoint, CSV and scans uploaded through the admin and read by the worker's
limited child: chunks keep their page, sheet or slide, citations show it, and a bad file is a
failed document with its reason, never a 500 or a document left pending."""

import io
import zipfile
from unittest import mock

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from knowledge.executor import _render
from knowledge.format_set import format_documents, scan_pdf
from knowledge.models import Document, DocumentUpload
from knowledge.retrieval import Mode, search
from knowledge.selectors import run_citations
from knowledge.services import base_index, document_index, knowledge_search_record
from tests.knowledge.helpers import make_base
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db

DOCUMENTS = {name: data for _format, name, data in format_documents()}


@pytest.fixture
def upload(admin_client, django_capture_on_commit_callbacks):
    """Upload through the admin (the request only stores the file), then index as the worker does."""

    def upload(base, name, data) -> tuple[Document, object]:
        with (
            mock.patch("knowledge.services.current_app.send_task"),
            django_capture_on_commit_callbacks(execute=True),
        ):
            response = admin_client.post(
                reverse("admin:knowledge_document_add"),
                {
                    "base": base.pk,
                    "title": "",
                    "source": "upload",
                    "url": "",
                    "tags": "[]",
                    "upload": SimpleUploadedFile(name, data, content_type="application/octet-stream"),
                },
            )
        document = Document.objects.get(base=base, filename=name)
        base_index(base_id=base.pk, document_ids=[document.pk])
        document.refresh_from_db()
        base.refresh_from_db()
        return document, response

    return upload


def _locations(document: Document) -> list[dict]:
    return [chunk.location for chunk in document.chunks.order_by("ordinal")]


def test_each_format_is_chunked_with_its_page_sheet_or_slide(upload):
    base = make_base(chunk_size=300, chunk_overlap=30)
    expected = {
        "warranty-policy.docx": [{}, {"heading": "保修期限"}, {"heading": "Repair process"}],
        "shipping-rates.xlsx": [{"sheet": "运费 Shipping", "rows": [1, 4]}, {"sheet": "运费 Shipping", "rows": [6, 6]}],
        "loyalty-training.pptx": [{"slide": 1}, {"slide": 2}],
        "stores.csv": [{"rows": [1, 3]}],
        "scanned-order-form.png": [{}],
        "scanned-delivery-receipt.pdf": [{"page": 1}, {"page": 2}],
    }
    for name, locations in expected.items():
        document, response = upload(base, name, DOCUMENTS[name])
        assert response.status_code == 302
        assert document.status == "indexed", (name, document.error)
        assert _locations(document) == locations, name
    assert base.status == "ready"
    receipt = Document.objects.get(base=base, filename="scanned-delivery-receipt.pdf")
    assert "外包装破损可以拒收" in receipt.chunks.get(ordinal=1).text


def test_reindexing_the_stored_text_keeps_the_locations(upload):
    base = make_base()
    document, _response = upload(base, "shipping-rates.xlsx", DOCUMENTS["shipping-rates.xlsx"])
    assert not DocumentUpload.objects.filter(document=document).exists()
    # A new chunk size: the text is cut again from the database, no file left to read.
    base.chunk_size, base.chunk_overlap = 80, 0
    base.save()
    document.base = base
    assert document_index(document=document) > 2
    chunks = list(document.chunks.order_by("ordinal"))
    header = "地区 Region | 承运商 Carrier | 时效 Days | 运费 Fee (CNY)"
    assert all(c.text.startswith(header) for c in chunks[:-1]) and chunks[-1].location["rows"] == [6, 6]
    assert {c.location["sheet"] for c in chunks} == {"运费 Shipping"}


def test_the_search_tool_and_the_citations_name_the_page_sheet_or_slide(upload, admin_client):
    base = make_base()
    deck, _response = upload(base, "loyalty-training.pptx", DOCUMENTS["loyalty-training.pptx"])
    # The document's admin page lists its chunks with their locations.
    page = admin_client.get(reverse("admin:knowledge_document_change", args=[deck.pk])).content.decode()
    assert "slide 1" in page and "slide 2" in page
    upload(base, "shipping-rates.xlsx", DOCUMENTS["shipping-rates.xlsx"])
    passages = search(base=base, query="积分什么时候过期 points expire", top_k=1, mode=Mode.KEYWORD)
    chunk = passages[0].chunk
    assert f"[C{chunk.pk}] 积分规则 Points, slide 1 (score " in _render(passages)

    run = ledger_run(make_agent())
    passages = search(base=base, query="新疆运费", top_k=1, mode=Mode.KEYWORD)
    knowledge_search_record(
        base=base, run=run, tool_call_id="t1", query="新疆运费", top_k=1, filters={}, passages=passages
    )
    [citation] = run_citations(run_id=run.pk)
    assert citation["location"] == "sheet 运费 Shipping, rows 1–4" and citation["title"] == "shipping-rates.xlsx"


def _zip_bomb() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", b"<Types/>")
        archive.writestr("word/document.xml", b"\0" * 300_000_000)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "error"),
    [
        ("truncated.docx", DOCUMENTS["warranty-policy.docx"][:20000], "The file is not a readable zip container"),
        ("bomb.docx", _zip_bomb(), "The file inflates to 300000008 bytes, more than the limit of 200000000"),
        (
            "slides.xlsx",
            DOCUMENTS["loyalty-training.pptx"],
            "The file is named slides.xlsx but its content is a PowerPoint",
        ),
        ("gbk.csv", "城市,电话\n苏州,0512-1234\n".encode("gbk"), None),
        ("neither.csv", b"a,b\n\x81\x30\xff\xff", "The file is not UTF-8 or GB18030 text."),
        ("empty-sheet.xlsx", None, "No text was found in the document."),
    ],
)
def test_bad_files_are_failed_documents_with_the_reason(upload, name, data, error):
    if data is None:
        import openpyxl

        out = io.BytesIO()
        openpyxl.Workbook().save(out)
        data = out.getvalue()
    base = make_base()
    document, response = upload(base, name, data)
    assert response.status_code == 302
    if error is None:  # GB18030 reads what UTF-8 cannot: the CSV is indexed, not refused
        assert document.status == "indexed" and document.text == "城市 | 电话\n苏州 | 0512-1234"
        return
    assert document.status == "failed" and document.error.startswith(error), document.error
    assert base.status == "failed" and f"{document.title}: {error}" in base.last_error
    assert not document.chunks.exists()


@pytest.mark.parametrize("name", ["nothing.docx", "nothing.png", "nothing.csv"])
def test_an_empty_file_is_a_form_error_and_nothing_is_stored(admin_client, name):
    base = make_base()
    response = admin_client.post(
        reverse("admin:knowledge_document_add"),
        {
            "base": base.pk,
            "title": "",
            "source": "upload",
            "url": "",
            "tags": "[]",
            "upload": SimpleUploadedFile(name, b""),
        },
    )
    assert response.status_code == 200 and "The submitted file is empty." in response.content.decode()
    assert not Document.objects.filter(base=base).exists()


def test_a_scan_gets_ocrs_allowance_and_past_it_is_a_failed_document(upload, settings):
    # The ordinary limits would stop OCR's model at once; the child raises them to OCR's when it
    # reads its first page by OCR, and only then.
    settings.AGENTRY_KNOWLEDGE_PARSE_CPU_SECONDS = 1
    settings.AGENTRY_KNOWLEDGE_PARSE_MEMORY_MB = 64
    document, _response = upload(make_base(), "receipt.pdf", DOCUMENTS["scanned-delivery-receipt.pdf"])
    assert document.status == "indexed" and _locations(document) == [{"page": 1}, {"page": 2}]

    settings.AGENTRY_KNOWLEDGE_OCR_CPU_SECONDS = 2
    pages = [[f"第{i}页 page {i}", "扫描件 scanned text " * 3] for i in range(1, 9)]
    document, _response = upload(make_base(name="long"), "long-scan.pdf", scan_pdf(pages))
    assert document.status == "failed"
    assert document.error == "Reading the document used more CPU time than its limit (2 s); it was stopped."
