"""The admin in real Chromium set to Chinese: it and the approval queue render in Simplified
Chinese, and the switcher in the header turns the site to English, which then stays."""

import pytest
from django.contrib.auth import get_user_model

from tests.support.workers import ARTIFACTS

pytestmark = pytest.mark.browser

PASSWORD = "correct horse battery"


@pytest.fixture
def browser_context_options():
    # The context's locale is what the browser sends as Accept-Language.
    return {"locale": "zh-CN"}


def test_admin_in_chinese_then_english_with_the_switcher(page, transactional_db):
    operator = get_user_model().objects.create_user("yunwei", password=PASSWORD, is_staff=True, is_superuser=True)
    page.goto("/admin/login/?next=/admin/")
    assert page.locator("html").get_attribute("lang") == "zh-hans"
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")

    assert page.locator("html").get_attribute("lang") == "zh-hans"
    assert page.locator("#group-operate tr[data-page=approvals] a").inner_text() == "审批队列"
    assert page.title() == "运维 | Agentry"
    assert page.locator(".language-switcher button[data-language=zh-hans]").get_attribute("aria-pressed") == "true"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-index-zh-hans.png"), full_page=True)

    # The approval queue and its script speak Chinese too (the script's words from jsi18n).
    page.goto("/approvals/")
    assert page.locator("h1").inner_text().startswith("等待决定")
    assert page.locator("#empty-note").inner_text() == "没有等待决定的请求。新的请求会自动出现在这里。"
    assert page.evaluate("gettext('expiring now')") == "即将过期"
    page.goto("/admin/")

    page.click(".language-switcher button[data-language=en]")
    page.wait_for_function("document.documentElement.lang === 'en'")
    assert page.url.endswith("/admin/")
    assert page.locator("#group-operate caption").inner_text().strip().lower() == "operate"
    assert page.locator("#group-operate tr[data-page=approvals] a").inner_text() == "Approval queue"
    assert page.title() == "Operations | Agentry"

    # The choice outlasts the page: the monitoring page comes in English too, though the
    # browser still asks for Chinese.
    page.goto("/monitor/")
    assert page.locator("html").get_attribute("lang") == "en"
    assert page.locator("#runs-now h3").inner_text() == "Runs now"
