"""Each test starts in the default language (tests/conftest.py), whatever the test before it
asked for: a request leaves its language active in the thread that served it."""

from django.conf import settings
from django.test import Client
from django.utils import translation


def test_a_page_fetched_in_chinese_leaves_chinese_active_in_the_thread():
    assert "登录" in Client().get("/approvals/login/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert translation.get_language() == "zh-hans"


def test_the_next_test_starts_in_the_default_language():
    """Fails after the test above unless the suite resets the language between tests."""
    assert translation.get_language() == settings.LANGUAGE_CODE
