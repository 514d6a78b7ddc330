"""The bad-input classes against the real ASGI server (uvicorn): every route answers a 4xx with
a JSON body in its error shape, including bytes no HTTP client library would send."""

import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from conversations.models import Approval, Conversation, Message, Run
from engine.loop import run_advance
from tests.approvals.conftest import Scenario, counter_steps
from tests.security.bad_input import BAD_BODIES, METHODS, NO_BODY, ROUTES, assert_error_shape, eval_ids, review_ids
from tests.support.factories import token_for

pytestmark = [pytest.mark.e2e]
# Page endpoints that answer JSON; the other pages answer a form with its errors again (HTML).
JSON_ROUTES = {"approvals/{approval}/preview/", "monitor/try/send/", "monitor/try/attachments/"}


@pytest.fixture
def live(api_server, fake_llm, monkeypatch):
    from engine.tasks import run_advance_task

    monkeypatch.setattr(run_advance_task, "delay", lambda run_id: None)
    user = User.objects.create_superuser("live-root", password="live-root-pass-1")
    scenario = Scenario(fake_llm, steps=counter_steps("live"), owner=user)
    run = scenario.post("Please count.")
    run_advance(run_id=run.pk)
    ids = {
        "approval": Approval.objects.get(run=run).pk,
        "run": run.pk,
        "conversation": run.conversation_id,
        "agent": scenario.agent.slug,
        "action": "cancel",
        "step": 1,
        "end_user": "u1",
        "memory": "00000000-0000-0000-0000-000000000000",
        "hook": "00000000-0000-0000-0000-000000000000",
        "attachment": "00000000-0000-0000-0000-000000000000",
        "widget": "00000000-0000-0000-0000-000000000000",
        "chat_channel": "00000000-0000-0000-0000-000000000000",
        **eval_ids(agent_version=run.agent_version),
        **review_ids(run=run),
    }
    api = httpx.Client(base_url=api_server.base_url, headers={"Authorization": f"Bearer {token_for(user)}"}, timeout=30)
    # Signed in as the browser would be; cookies set by hand, since deployments mark them Secure.
    session = Client()
    session.force_login(user)
    csrf = "c" * 32
    cookie = (
        f"{settings.SESSION_COOKIE_NAME}={session.cookies[settings.SESSION_COOKIE_NAME].value}; "
        f"{settings.CSRF_COOKIE_NAME}={csrf}"
    )
    pages = httpx.Client(base_url=api_server.base_url, timeout=30, headers={"Cookie": cookie})
    assert pages.get("/approvals/").status_code == 200
    yield {"ids": ids, "api": api, "pages": pages, "csrf": csrf, "base": api_server.base_url}
    api.close()
    pages.close()


def _client(live, route):
    return live["api"] if route.startswith(("api/", "v1/")) else live["pages"]


def _error_body(route, response) -> dict:
    assert response.headers["content-type"].startswith("application/json"), (
        route,
        response.status_code,
        response.text[:200],
    )
    body = response.json()
    assert_error_shape(route, body)
    return body


def _raw(base: str, request: bytes) -> tuple[int, dict, bytes]:
    """Send bytes as they are (httpx would percent-encode or refuse them)."""
    host, port = urlsplit(base).hostname, urlsplit(base).port
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {
        k.strip().lower().decode(): v.strip().decode("latin-1")
        for k, _, v in (line.partition(b":") for line in lines[1:])
    }
    return int(lines[0].split()[1]), headers, body


def test_wrong_methods_are_a_json_405_live(live):
    for route, allowed in ROUTES.items():
        if allowed is None:
            continue
        url = "/" + route.format(**live["ids"])
        for method in METHODS:
            if method in allowed:
                continue
            response = _client(live, route).request(
                method, url, content=b"{}", headers={"Content-Type": "application/json"}
            )
            assert response.status_code == 405, (method, url, response.status_code, response.text[:200])
            _error_body(route, response)
            assert "Allow" in response.headers


def test_bad_bodies_are_a_json_4xx_live(live):
    messages = Message.objects.count()
    for route, allowed in ROUTES.items():
        if route in NO_BODY or not allowed or not allowed - {"GET"}:
            continue
        url = "/" + route.format(**live["ids"])
        for name, body in BAD_BODIES.items():
            response = _client(live, route).post(
                url, content=body, headers={"Content-Type": "application/json", "X-CSRFToken": live["csrf"]}
            )
            assert 400 <= response.status_code < 500, (name, url, response.status_code, response.text[:200])
            if route in JSON_ROUTES or route.startswith(("api/", "v1/")):
                _error_body(route, response)
    assert Message.objects.count() == messages and Conversation.objects.count() == 1
    assert Approval.objects.get().status == Approval.Status.PENDING


@pytest.mark.parametrize("query", [b"agent=\xff\xfe", b"status=\xed\xa0\x80", b"agent=%ED%A0%80&tool=%ff"])
def test_invalid_utf8_in_query_strings_is_a_4xx_live(live, query):
    token = live["api"].headers["Authorization"]
    for route in ["api/v1/approvals/", "api/v1/runs/", "v1/models"]:
        path = ("/" + route.format(**live["ids"])).encode()
        status, headers, body = _raw(
            live["base"],
            b"GET " + path + b"?" + query + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: " + token.encode() + b"\r\n"
            b"Connection: close\r\n\r\n",
        )
        assert status < 500, (route, query, status, body[:200])
        if b"%" not in query:
            # Raw bytes that are not UTF-8: uvicorn refuses the request line before the app sees it.
            assert status == 400, (route, query, status, body[:200])
        elif status >= 400:
            assert headers["content-type"].startswith("application/json"), (route, query, status, body[:200])
            assert_error_shape(route, json.loads(body))


def test_invalid_bytes_in_headers_are_a_4xx_live(live):
    token = live["api"].headers["Authorization"].encode()
    path = f"/api/v1/conversations/{live['ids']['conversation']}/messages/".encode()
    body = json.dumps({"content": "hello"}).encode()
    for header in [
        b"Idempotency-Key: \xed\xa0\x80\xff",
        b"Authorization: Bearer \xed\xa0\x80",
        b"Content-Type: application/json; charset=\xff",
    ]:
        request = (
            b"POST "
            + path
            + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            + (b"" if header.startswith(b"Authorization") else b"Authorization: " + token + b"\r\n")
            + (b"" if header.startswith(b"Content-Type") else b"Content-Type: application/json\r\n")
            + header
            + b"\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        status, headers, answer = _raw(live["base"], request)
        assert status < 500, (header, status, answer[:200])
        if status >= 400:
            assert headers["content-type"].startswith("application/json"), (header, status, answer[:200])
            assert_error_shape("api/", json.loads(answer))
    # The one that was accepted (a Latin-1 idempotency key) started its run; nothing else did.
    assert Run.objects.count() <= 2
    events = f"/api/v1/runs/{live['ids']['run']}/events/".encode()
    status, headers, answer = _raw(
        live["base"],
        b"GET " + events + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Connection: close\r\nAuthorization: " + token + b"\r\n"
        b"Last-Event-ID: \xed\xa0\x80\r\n\r\n",
    )
    assert status == 400 and headers["content-type"].startswith("application/json"), (status, answer[:200])
    assert "Last-Event-ID" in json.loads(answer)["message"]
