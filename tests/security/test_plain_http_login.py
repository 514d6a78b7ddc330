"""A deployment without TLS: the cookies are HTTPS-only outside debug, so signing in over plain
HTTP cannot work. The login page says so beforehand and the CSRF failure page says why, in the
operator's language, naming the settings to change (platform_site.plain_http)."""

import pytest
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

WARNING = 'id="plain-http-warning"'


@pytest.fixture
def secure_cookies(settings):
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True


def test_the_login_page_warns_over_plain_http_and_names_the_settings(client, secure_cookies):
    page = client.get("/admin/login/").content.decode()
    assert WARNING in page
    assert "SESSION_COOKIE_SECURE, CSRF_COOKIE_SECURE" in page
    assert "AGENTRY_TRUST_X_FORWARDED_PROTO=1" in page
    assert 'id="login-form"' in page  # the form is still there


def test_the_pages_follow_the_operators_language(secure_cookies):
    browser = Client(enforce_csrf_checks=True, headers={"accept-language": "zh-CN"})
    page = browser.get("/admin/login/").content.decode()
    assert '<html lang="zh-hans"' in page and WARNING in page
    failure = browser.post("/admin/login/", {"username": "a", "password": "b"}).content.decode()
    assert "CSRF 验证失败" in failure and "CSRF_COOKIE_SECURE=0" in failure


def test_no_warning_over_https_or_with_cookies_that_may_travel_over_http(client, settings, secure_cookies):
    assert WARNING not in client.get("/admin/login/", secure=True).content.decode()
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = False
    assert WARNING not in client.get("/admin/login/").content.decode()


def test_a_csrf_failure_over_plain_http_says_why(secure_cookies):
    browser = Client(enforce_csrf_checks=True)
    response = browser.post("/admin/login/", {"username": "a", "password": "b"})
    assert response.status_code == 403
    page = response.content.decode()
    assert "CSRF_COOKIE_SECURE" in page and "SESSION_COOKIE_SECURE=0" in page

    # Over HTTPS the cookie was kept and something else failed: Django's own page.
    response = browser.post("/admin/login/", {"username": "a", "password": "b"}, secure=True)
    assert response.status_code == 403
    assert "CSRF_COOKIE_SECURE" not in response.content.decode()


def test_the_approval_queue_login_warns_too(client, secure_cookies):
    page = client.get(reverse("approvals:login")).content.decode()
    assert WARNING in page and "CSRF_COOKIE_SECURE" in page
    assert WARNING not in client.get(reverse("approvals:login"), secure=True).content.decode()
