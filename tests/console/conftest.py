import pytest

from tests.browser import chromium_browser


@pytest.fixture(scope="module")
def chromium():
    """One browser per test module (tests.browser.chromium_browser says why not longer)."""
    with chromium_browser() as browser:
        yield browser


@pytest.fixture
def browser_context_options() -> dict:
    """What a module adds to its pages' browser context (a locale, permissions): override it."""
    return {}


@pytest.fixture
def page(chromium, live_server, browser_context_options):
    context = chromium.new_context(
        viewport={"width": 1400, "height": 1000}, base_url=live_server.url, **browser_context_options
    )
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()
