"""The site in English and Simplified Chinese: pages and API errors follow the switcher's choice,
then the browser's Accept-Language; a language the site does not offer is a 400."""

import json

import pytest
from django.test import Client

from tests.support.api import client_for
from tests.support.factories import make_user

pytestmark = pytest.mark.django_db


def test_api_errors_follow_accept_language():
    for accept, expected in [
        ("zh-hans", "令牌无效或已被吊销。"),
        ("zh-CN,zh;q=0.9", "令牌无效或已被吊销。"),
        ("en", "Invalid or revoked token."),
    ]:
        response = Client().get("/api/v1/runs/", HTTP_AUTHORIZATION="Bearer nope", HTTP_ACCEPT_LANGUAGE=accept)
        assert response.status_code == 401
        assert response.json()["message"] == expected
        assert response["Content-Language"] == ("en" if accept == "en" else "zh-hans")


def test_api_validation_errors_in_chinese():
    api = client_for(make_user())
    response = api.post(
        "/api/v1/conversations/", {"agent": "no-such-agent"}, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert response.status_code == 400
    assert "没有你可以使用的智能体 'no-such-agent'。" in response.json()["message"]


def test_pages_follow_the_browser_then_the_switcher():
    client = Client()
    assert "登录" in client.get("/approvals/login/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    page = client.get("/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert '<html lang="zh-hans">' in page and "会调用工具的大模型智能体" in page
    # The switcher's choice beats the browser's language, and sends the visitor back.
    response = client.post("/language/", {"language": "en", "next": "/approvals/login/"})
    assert (response.status_code, response["Location"]) == (302, "/approvals/login/")
    page = client.get("/approvals/login/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "Sign in" in page and "登录" not in page


def test_the_switcher_refuses_a_language_not_offered():
    client = Client()
    response = client.post("/language/", {"language": "fr", "next": "/"}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 400
    assert response.json()["message"] == "请从提供的语言中选择一种：en, zh-hans。"
    assert client.get("/language/").status_code == 405


def test_the_scripts_strings_come_in_the_pages_language():
    body = Client().get("/jsi18n/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    catalog = json.loads(body.split("const newcatalog = ", 1)[1].split(";\n", 1)[0])
    assert catalog["sending…"] == "发送中…"
