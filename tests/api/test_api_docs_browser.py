"""The API docs in real Chromium with every other origin blocked: the page still renders the
whole API, and nothing asked for anything outside this server."""

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.browser import chromium_browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium_browser() as launched:
        yield launched


@pytest.fixture
def offline_page(browser, live_server):
    """A page whose requests to any origin but the live server's are refused and recorded."""
    origin = urlsplit(live_server.url).netloc
    context = browser.new_context()
    context.set_default_timeout(20_000)
    refused: list[str] = []

    def only_this_server(route):
        url = route.request.url
        if urlsplit(url).scheme in ("data", "blob") or urlsplit(url).netloc == origin:
            route.continue_()
        else:
            refused.append(url)
            route.abort()

    context.route("**/*", only_this_server)
    page = context.new_page()
    # A request the page's Content-Security-Policy stops never reaches the route above; the
    # browser reports it on the console instead.
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )
    yield page, live_server.url, refused
    context.close()


def test_swagger_ui_renders_every_operation_offline(offline_page):
    page, base, refused = offline_page
    page.goto(f"{base}/api/docs/")
    page.locator(".opblock-summary-path").first.wait_for()
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/api/v1/conversations/" in p for p in paths)
    assert "Agentry API" in page.locator(".information-container").inner_text()
    page.screenshot(path=str(ARTIFACTS / "api-docs-swagger.png"))
    assert refused == []


def test_the_former_redoc_address_leads_to_the_swagger_page(offline_page):
    page, base, refused = offline_page
    page.goto(f"{base}/api/redoc/")
    page.wait_for_url(f"{base}/api/docs/")
    page.locator(".opblock-summary-path").first.wait_for()
    assert refused == []
