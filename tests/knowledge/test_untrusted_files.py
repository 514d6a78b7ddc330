"""An uploaded file is untrusted: the web request only checks its size and kind and stores it;
the worker reads it in a child process with CPU-time, memory, wall-clock and output limits, and
a file that passes one ends failed with the reason, never as a 500 or a stuck worker."""

from unittest import mock

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from knowledge.models import Document, DocumentUpload
from knowledge.sections import Section
from knowledge.services import BASE_INDEX_TASK, base_index
from tests.knowledge.helpers import bomb_pdf, make_base, minimal_pdf, pdf_with_stream, slow_pdf

pytestmark = pytest.mark.django_db


def _upload(client, base, name, data, content_type="application/pdf"):
    return client.post(
        reverse("admin:knowledge_document_add"),
        {
            "base": base.pk,
            "title": "",
            "source": "upload",
            "url": "",
            "tags": "[]",
            "upload": SimpleUploadedFile(name, data, content_type=content_type),
        },
    )


@pytest.fixture
def store(admin_client, django_capture_on_commit_callbacks):
    """Upload through the admin, proving the request stores the file without reading it."""

    def upload(base, name, data, content_type="application/pdf") -> Document:
        with (
            mock.patch("knowledge.services.current_app.send_task") as send,
            mock.patch("knowledge.extract.PdfReader", side_effect=AssertionError("parsed in the web process")),
            mock.patch("knowledge.services.sections_from_bytes_limited", side_effect=AssertionError("parsed in web")),
            django_capture_on_commit_callbacks(execute=True),
        ):
            response = _upload(admin_client, base, name, data, content_type)
        assert response.status_code == 302, response.content.decode()[:2000]
        document = Document.objects.get(base=base, filename=name)
        send.assert_called_once_with(BASE_INDEX_TASK, args=[base.pk, [document.pk]])
        assert document.status == "pending" and document.text == ""
        assert bytes(DocumentUpload.objects.get(document=document).data) == data
        return document

    return upload


def _indexed(document: Document) -> Document:
    base_index(base_id=document.base_id, document_ids=[document.pk])
    document.refresh_from_db()
    return document


def test_a_million_text_operators_are_stopped_at_the_cpu_limit(store, admin_client, settings):
    settings.AGENTRY_KNOWLEDGE_PARSE_CPU_SECONDS = 1
    base = make_base()
    data = slow_pdf()
    assert len(data) < 11_000
    document = _indexed(store(base, "slow.pdf", data))
    assert document.status == "failed"
    assert document.error == "Reading the document used more CPU time than its limit (1 s); it was stopped."
    assert not document.chunks.exists()
    base.refresh_from_db()
    assert base.status == "failed" and "slow.pdf: Reading the document used more CPU time" in base.last_error
    # The reason is on the document's row in the admin, and on its base's page.
    listing = admin_client.get(reverse("admin:knowledge_document_changelist")).content.decode()
    assert "Reading the document used more CPU time than its limit (1 s)" in listing
    page = admin_client.get(reverse("admin:knowledge_knowledgebase_change", args=[base.pk])).content.decode()
    assert "Reading the document used more CPU time than its limit (1 s)" in page


def test_the_wall_clock_limit_stops_a_reader_that_cpu_time_would_not_yet(store, settings):
    settings.AGENTRY_KNOWLEDGE_PARSE_TIMEOUT_SECONDS = 1
    document = _indexed(store(make_base(), "slow.pdf", slow_pdf()))
    assert document.status == "failed"
    assert document.error == "Reading the document took longer than its time limit (1 s); it was stopped."


def test_a_decompression_bomb_is_a_failed_document_not_a_500(store):
    data = bomb_pdf()
    assert len(data) < 80_000
    document = _indexed(store(make_base(), "bomb.pdf", data))
    assert document.status == "failed"
    assert document.error.startswith("The PDF holds a stream that inflates past the parser's limit")
    assert not document.chunks.exists()


def test_a_reader_that_needs_more_memory_than_allowed_is_stopped(store, settings):
    settings.AGENTRY_KNOWLEDGE_PARSE_MEMORY_MB = 8
    # Decoding 12 MB of text takes 12 MB more than the file's bytes.
    document = _indexed(store(make_base(), "big.txt", b"a" * 12_000_000, "text/plain"))
    assert document.status == "failed"
    assert document.error == "Reading the document needed more memory than its limit (8 MB); it was stopped."


def test_a_stream_under_the_parsers_own_limit_still_meets_the_memory_limit(store, settings):
    settings.AGENTRY_KNOWLEDGE_PARSE_MEMORY_MB = 32
    document = _indexed(store(make_base(), "big.pdf", bomb_pdf(60_000_000)))
    assert document.status == "failed" and document.error.startswith("The PDF cannot be read: ")


def test_a_text_longer_than_the_limit_is_refused(store, settings):
    settings.AGENTRY_KNOWLEDGE_MAX_TEXT_CHARS = 20
    document = _indexed(store(make_base(), "long.txt", b"x" * 21, "text/plain"))
    assert document.status == "failed" and document.error == "The document's text is longer than 20 characters."


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"%PDF-1.4\n" + b"\x00garbage" * 100, "The PDF cannot be read: Stream has ended unexpectedly"),
        (pdf_with_stream(b"BT (a) Tj ET")[:-40], "The PDF cannot be read: Stream has ended unexpectedly"),
        (
            pdf_with_stream(b"\x78\x9c broken").replace(b"/Length", b"/Filter /FlateDecode /Length"),
            "No text was found in the document.",
        ),
    ],
)
def test_any_parser_error_is_a_failed_document_with_the_reason(store, data, error):
    document = _indexed(store(make_base(), "bad.pdf", data))
    assert document.status == "failed" and document.error == error


def test_a_failed_file_is_kept_and_read_again_with_new_limits(store, settings):
    settings.AGENTRY_KNOWLEDGE_MAX_TEXT_CHARS = 10
    document = _indexed(store(make_base(), "refunds.pdf", minimal_pdf("Refunds arrive in 5 days.")))
    assert document.status == "failed" and DocumentUpload.objects.filter(document=document).exists()
    settings.AGENTRY_KNOWLEDGE_MAX_TEXT_CHARS = 1000
    document = _indexed(document)
    assert document.status == "indexed" and document.text == "Refunds arrive in 5 days."
    # Read once: the text is the document's now, and re-indexing cuts it again without the file.
    assert not DocumentUpload.objects.filter(document=document).exists()
    assert _indexed(document).status == "indexed"


def test_a_file_uploaded_again_while_the_first_is_read_wins(store):
    base = make_base()
    document = store(base, "a.txt", "旧的退货政策。".encode(), "text/plain")
    first = DocumentUpload.objects.get(document=document)

    def upload_again(data, **kwargs):
        # The operator uploads a new version while the worker reads the first one.
        DocumentUpload.objects.filter(pk=first.pk).delete()
        DocumentUpload.objects.create(
            document=document, filename="a.txt", content_type="text/plain", data="新的退货政策。".encode(), size=21
        )
        return "", [Section(data.decode())]

    with mock.patch("knowledge.services.sections_from_bytes_limited", side_effect=upload_again):
        _indexed(document)
    document.refresh_from_db()
    # The first read is dropped: the new file is read by its own queued indexing.
    assert document.status == "pending" and not document.chunks.exists()
    document = _indexed(document)
    assert document.text == "新的退货政策。" and document.status == "indexed"


def test_a_document_switched_to_a_url_forgets_its_unread_file(store, admin_client, settings, fake_llm):
    settings.AGENTRY_KNOWLEDGE_MAX_TEXT_CHARS = 5
    document = _indexed(store(make_base(), "a.txt", b"too long for the limit", "text/plain"))
    assert document.status == "failed" and DocumentUpload.objects.filter(document=document).exists()
    host = fake_llm.api_base.split("//")[1].split("/")[0]
    settings.AGENTRY_OUTBOUND_ALLOWLIST = [host]
    settings.AGENTRY_KNOWLEDGE_MAX_TEXT_CHARS = 1000
    with mock.patch("knowledge.services.current_app.send_task"):
        response = admin_client.post(
            reverse("admin:knowledge_document_change", args=[document.pk]),
            {
                "base": document.base_id,
                "title": "health",
                "source": "url",
                "url": f"http://{host}/_health",
                "tags": "[]",
                "chunks-TOTAL_FORMS": 0,
                "chunks-INITIAL_FORMS": 0,
            },
        )
    assert response.status_code == 302
    assert not DocumentUpload.objects.filter(document=document).exists()
    document = _indexed(document)
    assert document.status == "indexed" and '"status"' in document.text
