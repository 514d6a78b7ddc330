"""Single sign-on end to end: Chromium signs in at a real OpenID Connect provider (django-oauth-
toolkit with OIDC on, in its own process: tests/support/oidc_provider) and comes back to Agentry's
admin in the workspace its groups claim maps to; logging out ends the session here and there."""

import re
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore

from tests.support.browser import chromium_browser
from tests.support.oidc_provider.process import OIDCProvider
from workspaces.access import SESSION_KEY
from workspaces.models import Membership, SignOnIdentity, Workspace

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

CLIENT_ID = "agentry-test"
CLIENT_SECRET = "agentry-test-secret-0123456789"


@pytest.fixture(scope="module")
def chromium():
    with chromium_browser() as browser:
        yield browser


@pytest.fixture(scope="module")
def provider(live_server):
    provider = OIDCProvider(
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        redirect_uris=[f"{live_server.url}/oidc/callback/"],
        people=[
            {
                "username": "alice",
                "password": "alice-provider-pass",
                "email": "alice@example.test",
                "groups": ["agentry-beta-builders", "staff-everywhere"],
            }
        ],
    )
    yield provider
    provider.stop()


@pytest.fixture
def sign_on(settings, provider):
    settings.AGENTRY_OIDC_ISSUER = provider.issuer
    settings.AGENTRY_OIDC_CLIENT_ID = CLIENT_ID
    settings.AGENTRY_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.AGENTRY_OIDC_PROVIDER_NAME = "Test provider"
    settings.AGENTRY_OIDC_ROLE_MAP = "agentry-acme-viewers=acme:viewer,agentry-beta-builders=beta:builder"
    settings.AGENTRY_LOCAL_LOGIN = False
    return provider


def test_chromium_signs_in_at_the_provider_and_lands_in_the_mapped_workspace(chromium, live_server, sign_on, db):
    Workspace.objects.create(name="Acme", slug="acme")
    beta = Workspace.objects.create(name="Beta", slug="beta")
    context = chromium.new_context(base_url=live_server.url)
    context.set_default_timeout(20_000)
    page = context.new_page()
    visited = []
    page.on("request", lambda request: visited.append(request.url))
    try:
        page.goto("/admin/")
        assert "/admin/login/" in page.url
        # Local login is off: only the provider's button.
        assert page.locator("input[name=password]").count() == 0
        page.get_by_role("link", name="Sign in with Test provider").click()

        page.wait_for_url(re.compile(r"127\.0\.0\.1:\d+/accounts/login/"))
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "alice-provider-pass")
        page.get_by_role("button", name="Sign in to the provider").click()
        # The provider asks for consent once.
        page.get_by_role("button", name="Authorize").click()

        page.wait_for_url(f"{live_server.url}/admin/")
        assert page.locator("#logout-form").count() == 1

        alice = get_user_model().objects.get(username="alice")
        assert alice.is_staff and not alice.has_usable_password()
        assert SignOnIdentity.objects.filter(user=alice, issuer=sign_on.issuer).exists()
        membership = Membership.objects.get(user=alice)
        assert (membership.workspace, membership.role, membership.from_sso) == (beta, "builder", True)
        session_key = next(c["value"] for c in context.cookies() if c["name"] == "sessionid")
        session = SessionStore(session_key)
        assert session[SESSION_KEY] == beta.pk
        # A builder of beta sees the agents in the admin.
        page.goto("/admin/agents/agent/")
        assert page.url.endswith("/admin/agents/agent/")

        # Logging out ends Agentry's session and the provider's, and comes back to the login page.
        page.goto("/admin/")
        page.locator("#logout-form button").click()
        page.wait_for_url(re.compile(r"/admin/login/"))
        assert urlsplit(page.url).netloc == urlsplit(live_server.url).netloc
        assert any(url.startswith(f"{sign_on.issuer}/logout/?") and "id_token_hint=" in url for url in visited)
        assert not SessionStore(session_key).exists(session_key)
        page.goto("/admin/")
        assert "/admin/login/" in page.url
    finally:
        context.close()
