from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from pypdf import PdfWriter

from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.services import BASE_INDEX_TASK, base_index
from tests.knowledge.helpers import add_documents, make_base, minimal_pdf

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent():
    with mock.patch("knowledge.services.current_app.send_task") as send:
        yield send


def _staff(*codenames, name="kb-staff"):
    user = get_user_model().objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def _upload(client, base, name, data, content_type="text/plain", **extra):
    return client.post(
        reverse("admin:knowledge_document_add"),
        {
            "base": base.pk,
            "title": extra.get("title", ""),
            "source": "upload",
            "url": "",
            "tags": extra.get("tags", "[]"),
            "upload": SimpleUploadedFile(name, data, content_type=content_type),
        },
    )


def test_creating_a_base_in_the_admin_creates_its_search_tool(admin_client):
    response = admin_client.post(
        reverse("admin:knowledge_knowledgebase_add"),
        {
            "name": "Help centre",
            "chunk_size": 400,
            "chunk_overlap": 40,
            "keyword_method": "trigram",
            "score_threshold": 0,
            "fallback_answer": "Sorry, I do not know.",
            "on_nothing_found": "fallback",
        },
    )
    assert response.status_code == 302
    base = KnowledgeBase.objects.get(name="Help centre")
    assert base.search_tool.kind == "knowledge" and base.search_tool.name == "search_help_centre"


def test_an_overlap_not_smaller_than_the_chunk_is_a_form_error(admin_client):
    response = admin_client.post(
        reverse("admin:knowledge_knowledgebase_add"),
        {"name": "x", "chunk_size": 100, "chunk_overlap": 100, "keyword_method": "jieba", "score_threshold": 0},
    )
    assert response.status_code == 200 and not KnowledgeBase.objects.exists()
    assert "overlap must be smaller" in response.content.decode()


def test_uploads_of_text_markdown_html_and_pdf_are_read_and_queued(
    admin_client, sent, django_capture_on_commit_callbacks
):
    base = make_base()
    with django_capture_on_commit_callbacks(execute=True):
        assert _upload(admin_client, base, "a.md", "# 退货\n\n七天无理由退货。".encode()).status_code == 302
        html = (
            b"<html><head><title>Shipping</title></head><body><script>x()</script><p>Free over $50.</p></body></html>"
        )
        assert _upload(admin_client, base, "b.html", html, "text/html").status_code == 302
        writer = PdfWriter()
        writer.add_blank_page(100, 100)
        pdf = SimpleUploadedFile("c.pdf", b"", content_type="application/pdf")
        writer.write(pdf.file)
        assert (
            _upload(
                admin_client, base, "d.pdf", minimal_pdf("Refunds arrive in 5 days."), "application/pdf"
            ).status_code
            == 302
        )
        # A PDF with no text layer is refused: there is nothing to index.
        response = _upload(admin_client, base, "c.pdf", pdf.file.getvalue(), "application/pdf")
        assert response.status_code == 200 and "No text was found" in response.content.decode()
    markdown, page, pdf_document = Document.objects.order_by("pk")
    assert pdf_document.title == "d.pdf" and pdf_document.text == "Refunds arrive in 5 days."
    assert markdown.title == "a.md" and "七天无理由退货" in markdown.text
    assert page.title == "Shipping" and page.text == "Free over $50." and "x()" not in page.text
    assert [c.args[0] for c in sent.call_args_list] == [BASE_INDEX_TASK] * 3


@pytest.mark.parametrize(
    ("name", "data", "fields", "error"),
    [
        ("a.exe", b"MZ\x00\x01", {"content_type": "application/octet-stream"}, "Upload text, Markdown, HTML or PDF"),
        ("a.txt", b"\xff\xfe\x00\xd8\x00", {}, "not UTF-8"),
        ("a.txt", b"ok", {"tags": '"not a list"'}, "JSON list"),
        ("a.txt", b"ok", {"tags": "[" * 5000}, ""),
    ],
)
def test_bad_uploads_are_form_errors(admin_client, sent, name, data, fields, error):
    base = make_base()
    response = _upload(admin_client, base, name, data, **fields)
    assert response.status_code == 200 and error in response.content.decode()
    assert not Document.objects.exists() and not sent.called


def test_a_url_document_without_its_url_is_a_form_error(admin_client, sent):
    base = make_base()
    response = admin_client.post(
        reverse("admin:knowledge_document_add"),
        {"base": base.pk, "title": "x", "source": "url", "url": "", "tags": "[]"},
    )
    assert response.status_code == 200 and "needs its URL" in response.content.decode()


def test_permissions_gate_the_pages_and_the_reindex_action(client, sent):
    base = make_base()
    changelist = reverse("admin:knowledge_knowledgebase_changelist")
    client.force_login(_staff())
    assert client.get(changelist).status_code == 403
    assert client.get(reverse("admin:knowledge_document_add")).status_code == 403

    client.force_login(_staff("view_knowledgebase", name="kb-viewer"))
    assert client.get(changelist).status_code == 200
    response = client.post(changelist, {"action": "reindex_selected", "_selected_action": [base.pk]})
    assert not sent.called  # an action the user may not run is not offered, and not run
    assert response.status_code == 200

    user = get_user_model().objects.get(username="kb-viewer")
    user.user_permissions.add(Permission.objects.get(codename="change_knowledgebase"))
    client.force_login(user)
    response = client.post(changelist, {"action": "reindex_selected", "_selected_action": [base.pk]})
    assert response.status_code == 302
    # The search ledger is read-only, even for a superuser.
    assert client.get(reverse("admin:knowledge_knowledgesearch_add")).status_code == 403


def test_the_search_ledger_cannot_be_written_by_anyone(admin_client):
    assert admin_client.get(reverse("admin:knowledge_knowledgesearch_add")).status_code == 403
    assert admin_client.get(reverse("admin:knowledge_knowledgesearch_changelist")).status_code == 200


def test_uploading_again_on_the_document_replaces_its_text_and_chunks(
    admin_client, sent, django_capture_on_commit_callbacks
):
    base = make_base()
    [document] = add_documents(base, "zh-returns.md")
    old_chunks = set(document.chunks.values_list("pk", flat=True))
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            reverse("admin:knowledge_document_change", args=[document.pk]),
            {
                "base": base.pk,
                "title": document.title,
                "source": "upload",
                "url": "",
                "tags": "[]",
                "upload": SimpleUploadedFile(
                    "new.txt", "新的退货政策：十五天内可退。".encode(), content_type="text/plain"
                ),
                "chunks-TOTAL_FORMS": 0,
                "chunks-INITIAL_FORMS": len(old_chunks),
            },
        )
    assert response.status_code == 302
    sent.assert_called_once_with(BASE_INDEX_TASK, args=[base.pk, [document.pk]])
    base_index(base_id=base.pk, document_ids=[document.pk])
    document.refresh_from_db()
    assert document.filename == "new.txt" and document.status == "indexed"
    assert list(document.chunks.values_list("text", flat=True)) == ["新的退货政策：十五天内可退。"]
    assert not Chunk.objects.filter(pk__in=old_chunks).exists()
