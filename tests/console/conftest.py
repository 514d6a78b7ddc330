import pytest

from tests.browser import chromium_browser


@pytest.fixture(scope="module")
def chromium():
    """One browser per test module (tests.browser.chromium_browser says why not longer)."""
    with chromium_browser() as browser:
        yield browser
