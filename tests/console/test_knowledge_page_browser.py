"""A knowledge base's page in real Chromium, in English and in Chinese: it lists the base's
documents with their status and chunks (a failed one with its reason), offers an upload, and its
test search shows the best passages with their scores. Screenshots are kept in test-artifacts/
(knowledge-base-en.png, knowledge-base-zh-hans.png)."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from knowledge.models import Document
from tests.knowledge.helpers import add_documents, make_base
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery"
LANGUAGES = {"en": ("en-US", "Test search", "Failed"), "zh-hans": ("zh-CN", "测试检索", "失败")}


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_base_page_lists_documents_and_searches_with_scores(chromium, live_server, language):
    locale, search_heading, failed = LANGUAGES[language]
    operator = get_user_model().objects.create_user("kb-operator", password=PASSWORD, is_staff=True, is_superuser=True)
    base = make_base(name="售后 FAQ")
    add_documents(base, "zh-returns.md", "zh-shipping-fee.md", "en-returns.md")
    Document.objects.create(base=base, title="scan.pdf", status="failed", error="The PDF cannot be read: EOF marker")

    context = chromium.new_context(viewport={"width": 1366, "height": 900}, base_url=live_server.url, locale=locale)
    page = context.new_page()
    page.set_default_timeout(20_000)
    url = reverse("admin:knowledge_knowledgebase_change", args=[base.pk])
    page.goto(f"/admin/login/?next={url}")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{url}")
    assert page.locator("html").get_attribute("lang") == language

    documents = page.locator("#kb-documents")
    for title in ("zh-returns.md", "zh-shipping-fee.md", "en-returns.md", "scan.pdf"):
        assert title in documents.inner_text()
    assert failed in documents.inner_text() and "EOF marker" in documents.inner_text()
    assert page.locator("#kb-upload input[type=file]").count() == 1

    assert search_heading in page.locator("#kb-search h2").inner_text()
    page.fill("#kb-search input[name=q]", "寄到西藏要加钱吗")
    page.locator("#kb-search input[type=submit]").click()
    results = page.locator("table#kb-search-results tbody tr")
    results.first.wait_for()
    assert "zh-shipping-fee.md" in results.first.inner_text()
    # The page fits a laptop's screen: nothing scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"knowledge-base-{language}.png"), full_page=True)
    context.close()
