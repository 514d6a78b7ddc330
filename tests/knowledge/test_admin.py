import io
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from pypdf import PdfWriter

from knowledge.models import Chunk, Document, DocumentUpload, KnowledgeBase
from knowledge.retrieval import search
from knowledge.services import BASE_INDEX_TASK, base_index, base_index_enqueue
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


def test_uploads_are_stored_then_read_on_the_worker(admin_client, sent, django_capture_on_commit_callbacks):
    base = make_base()
    writer = PdfWriter()
    writer.add_blank_page(100, 100)
    blank = io.BytesIO()
    writer.write(blank)
    files = [
        ("a.md", "```\n# not a title\n```\n# 退货政策\n\n七天无理由退货。".encode(), "text/plain"),
        ("b.html", b"<html><head><title>Shipping</title></head><body><script>x()</script><p>Free over $50.</p>", ""),
        ("d.pdf", minimal_pdf("Refunds arrive in 5 days."), "application/pdf"),
        ("c.pdf", blank.getvalue(), "application/pdf"),
        ("e.txt", b"\xff\xfe\x00\xd8\x00", "text/plain"),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        for name, data, content_type in files:
            assert _upload(admin_client, base, name, data, content_type).status_code == 302
    assert [c.args[0] for c in sent.call_args_list] == [BASE_INDEX_TASK] * 5
    documents = list(Document.objects.order_by("pk"))
    # Until the worker reads them, the documents are pending under their file names.
    assert [(d.title, d.status, d.text) for d in documents] == [(name, "pending", "") for name, _, _ in files]

    base_index(base_id=base.pk, document_ids=[d.pk for d in documents])
    markdown, page, pdf, blank_pdf, not_text = Document.objects.order_by("pk")
    assert markdown.title == "退货政策" and "七天无理由退货" in markdown.text and markdown.filename == "a.md"
    assert page.title == "Shipping" and page.text == "Free over $50." and "x()" not in page.text
    assert pdf.title == "d.pdf" and pdf.text == "Refunds arrive in 5 days." and pdf.status == "indexed"
    # Nothing to index, or not text: failed, with the reason, shown on the document list.
    assert (blank_pdf.status, blank_pdf.error) == ("failed", "No text was found in the document.")
    assert (not_text.status, not_text.error) == ("failed", "The file is not UTF-8 or GB18030 text.")
    listing = admin_client.get(reverse("admin:knowledge_document_changelist")).content.decode()
    assert "No text was found in the document." in listing


def test_a_title_given_by_the_operator_is_kept(admin_client, sent, django_capture_on_commit_callbacks):
    base = make_base()
    with django_capture_on_commit_callbacks(execute=True):
        assert (
            _upload(admin_client, base, "a.md", b"# Returns\n\nWithin 7 days.", title="Our returns").status_code == 302
        )
    base_index(base_id=base.pk, document_ids=list(Document.objects.values_list("pk", flat=True)))
    assert Document.objects.get().title == "Our returns"


def test_a_found_title_another_document_has_keeps_the_file_name(admin_client, sent):
    base = make_base()
    Document.objects.create(base=base, title="Returns", text="x")
    assert _upload(admin_client, base, "a.md", b"# Returns\n\nWithin 7 days.").status_code == 302
    document = Document.objects.get(filename="a.md")
    base_index(base_id=base.pk, document_ids=[document.pk])
    document.refresh_from_db()
    assert document.title == "a.md" and document.status == "indexed"


def test_a_file_name_another_document_has_as_title_is_a_form_error(admin_client, sent):
    base = make_base()
    Document.objects.create(base=base, title="a.md", text="x")
    response = _upload(admin_client, base, "a.md", b"# Returns")
    assert response.status_code == 200 and "already exists" in response.content.decode()
    assert Document.objects.count() == 1 and not sent.called


@pytest.mark.parametrize(
    ("name", "data", "fields", "error"),
    [
        (
            "a.exe",
            b"MZ\x00\x01",
            {"content_type": "application/octet-stream"},
            "Upload text, Markdown, HTML, CSV, PDF, Word",
        ),
        ("a.txt", b"", {}, "The submitted file is empty"),
        ("a.txt", b"x" * 101, {}, "The file is larger than 100 bytes."),
        ("a.txt", b"ok", {"tags": '"not a list"'}, "JSON list"),
        ("a.txt", b"ok", {"tags": "[" * 5000}, ""),
    ],
)
def test_bad_uploads_are_form_errors(admin_client, sent, settings, name, data, fields, error):
    settings.AGENTRY_KNOWLEDGE_MAX_FILE_BYTES = 100
    base = make_base()
    response = _upload(admin_client, base, name, data, **fields)
    assert response.status_code == 200 and error in response.content.decode()
    assert not Document.objects.exists() and not DocumentUpload.objects.exists() and not sent.called


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


def test_the_base_list_counts_all_of_the_bases_documents(admin_client, sent):
    base = make_base()
    first, *_ = add_documents(base, "zh-returns.md", "zh-refund.md", "en-returns.md")
    changelist = reverse("admin:knowledge_knowledgebase_changelist")
    assert "3 of 3 documents" in admin_client.get(changelist).content.decode()
    # One document queued again: the others stay indexed, and the base still has three.
    base_index_enqueue(base=base, document_ids=[first.pk])
    assert "2 of 3 documents" in admin_client.get(changelist).content.decode()
    base_index(base_id=base.pk, document_ids=[first.pk])
    assert "3 of 3 documents" in admin_client.get(changelist).content.decode()


def test_the_base_page_lists_its_documents_with_status_chunks_and_reason(admin_client):
    base = make_base()
    [indexed] = add_documents(base, "zh-returns.md")
    Document.objects.create(base=base, title="broken.pdf", status="failed", error="The PDF cannot be read: boom")
    page = admin_client.get(reverse("admin:knowledge_knowledgebase_change", args=[base.pk])).content.decode()
    documents = page[page.index('id="kb-documents"') : page.index('id="kb-search"')]
    assert reverse("admin:knowledge_document_change", args=[indexed.pk]) in documents
    assert f"<td>{indexed.chunks.count()}</td>" in documents and "Indexed" in documents
    assert "broken.pdf" in documents and "The PDF cannot be read: boom" in documents and "Failed" in documents
    assert 'id="kb-upload"' in documents


def test_the_test_search_shows_the_top_passages_with_their_scores(admin_client):
    base = make_base()
    add_documents(base, "zh-returns.md", "zh-shipping-fee.md", "en-returns.md")
    url = reverse("admin:knowledge_knowledgebase_change", args=[base.pk])
    response = admin_client.get(url, {"q": "寄到西藏要加钱吗", "mode": "keyword", "top_k": 2})
    results = response.content.decode().split('id="kb-search-results"')[1]
    expected = search(base=base, query="寄到西藏要加钱吗", top_k=2, mode="keyword")
    assert len(expected) == 2 and results.count("<tr>") == 3  # a header and two passages
    best = expected[0]
    assert best.chunk.document.title == "zh-shipping-fee.md"
    assert f"zh-shipping-fee.md [C{best.chunk.pk}]" in results and f"{best.score:.4f}" in results
    # Nothing above the threshold is said so.
    response = admin_client.get(url, {"q": "zzzz qqqq", "mode": "keyword", "top_k": 3})
    assert "No passage scored above the threshold." in response.content.decode()


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"q": "退货", "mode": "keyword", "top_k": 99}, "less than or equal to 10"),
        ({"q": "退货", "mode": "vector", "top_k": 3}, "Select a valid choice"),
        ({"q": "x" * 1001, "mode": "keyword", "top_k": 3}, "at most 1000 characters"),
        ({"q": "", "mode": "keyword", "top_k": 3}, "This field is required"),
    ],
)
def test_bad_test_search_input_is_a_form_error(admin_client, params, error):
    base = make_base()  # no embedding model: keyword search only
    response = admin_client.get(reverse("admin:knowledge_knowledgebase_change", args=[base.pk]), params)
    assert response.status_code == 200 and error in response.content.decode()
    assert 'id="kb-search-results"' not in response.content.decode()


def test_the_test_search_offers_vector_and_combined_with_an_embedding_model(admin_client, fake_llm):
    base = make_base(embeddings_at=fake_llm.api_base)
    add_documents(base, "zh-refund.md", "en-password.md")
    url = reverse("admin:knowledge_knowledgebase_change", args=[base.pk])
    page = admin_client.get(url).content.decode()
    assert 'value="combined"' in page and 'value="vector"' in page and 'value="keyword"' in page
    response = admin_client.get(url, {"q": "reset password link", "mode": "vector", "top_k": 1})
    results = response.content.decode().split('id="kb-search-results"')[1]
    [best] = search(base=base, query="reset password link", top_k=1, mode="vector")
    assert "en-password.md" in results and f"{best.vector_score:.4f}" in results


def test_an_upload_on_the_base_page_is_stored_and_queued(admin_client, sent, django_capture_on_commit_callbacks):
    base = make_base()
    upload_url = reverse("admin:knowledge_knowledgebase_upload", args=[base.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(upload_url, {"upload": SimpleUploadedFile("faq.md", b"# FAQ\n\nHello.")})
    assert response.status_code == 302 and response.url == reverse(
        "admin:knowledge_knowledgebase_change", args=[base.pk]
    )
    document = Document.objects.get(base=base)
    assert (document.title, document.status, document.filename) == ("faq.md", "pending", "faq.md")
    sent.assert_called_once_with(BASE_INDEX_TASK, args=[base.pk, [document.pk]])
    base_index(base_id=base.pk, document_ids=[document.pk])
    document.refresh_from_db()
    assert (document.title, document.status) == ("FAQ", "indexed")

    # The same file name again replaces that document's file.
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(upload_url, {"upload": SimpleUploadedFile("faq.md", b"# FAQ\n\nBye.")})
    base_index(base_id=base.pk, document_ids=[document.pk])
    document.refresh_from_db()
    assert Document.objects.count() == 1 and document.text == "# FAQ\n\nBye." and document.title == "FAQ"

    # A file of a kind nobody can read is refused before anything is stored.
    response = admin_client.post(
        upload_url, {"upload": SimpleUploadedFile("a.exe", b"MZ", content_type="application/octet-stream")}, follow=True
    )
    assert "Upload text, Markdown, HTML, CSV, PDF, Word (.docx), Excel (.xlsx)" in response.content.decode()
    assert Document.objects.count() == 1 and not DocumentUpload.objects.exists()


def test_the_base_page_gates_search_by_view_and_upload_by_add_or_change(client, sent):
    base = make_base()
    add_documents(base, "zh-returns.md")
    page = reverse("admin:knowledge_knowledgebase_change", args=[base.pk])
    upload_url = reverse("admin:knowledge_knowledgebase_upload", args=[base.pk])

    def upload(name):
        return client.post(upload_url, {"upload": SimpleUploadedFile(name, b"text")})

    client.force_login(_staff("view_document", name="no-base"))
    assert client.get(page, {"q": "退货", "mode": "keyword", "top_k": 3}).status_code == 403
    assert upload("new.txt").status_code == 403

    viewer = _staff("view_knowledgebase", "view_document", name="viewer")
    client.force_login(viewer)
    response = client.get(page, {"q": "退货", "mode": "keyword", "top_k": 3})
    assert response.status_code == 200 and "zh-returns.md [C" in response.content.decode()
    assert 'id="kb-upload"' not in response.content.decode()
    assert upload("new.txt").status_code == 403
    assert client.get(upload_url).status_code == 405

    viewer.user_permissions.add(Permission.objects.get(codename="add_document"))
    client.force_login(viewer)
    assert 'id="kb-upload"' in client.get(page).content.decode()
    assert upload("new.txt").status_code == 302 and Document.objects.filter(filename="new.txt").exists()
    # A file of the same name would replace that document: that is a change.
    assert upload("new.txt").status_code == 403
    viewer.user_permissions.add(Permission.objects.get(codename="change_document"))
    client.force_login(viewer)
    assert upload("new.txt").status_code == 302 and Document.objects.filter(filename="new.txt").count() == 1
