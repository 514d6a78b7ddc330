import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from tests.support.browser import chromium_browser


@pytest.fixture(scope="module")
def chromium():
    """One browser per test module (tests.support.browser.chromium_browser says why not longer)."""
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


@pytest.fixture
def staff(client):
    """A staff member who may read and requeue runs (the monitoring pages' on-call), signed in."""
    user = get_user_model().objects.create_user("oncall", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="conversations", codename__in=["view_run", "add_run"])
    )
    client.force_login(user)
    return user
