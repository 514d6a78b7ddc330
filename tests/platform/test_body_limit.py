"""Request bodies are limited by the web server's application itself (platform_site.body_limit),
with no proxy in front: against a live uvicorn, a Content-Length above the limit is refused
before the body is read, and a chunked body is refused as soon as it passes the limit, while the
client is still sending, in the error shape of the URL and the language the client asks for."""

import json
import select
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from django.db import connection

from tests.conftest import _database_url
from tests.support.api_server import ApiServer

# The server runs on the test database, which only a test marked for it sets up.
pytestmark = [pytest.mark.django_db, pytest.mark.e2e]  # a live uvicorn per test

LIMIT = 64 * 1024
UPLOAD_LIMIT = 400_000


@pytest.fixture(scope="module")
def small_limits_server(django_db_setup, django_db_blocker):
    if connection.vendor != "postgresql":
        pytest.skip("end-to-end tests need PostgreSQL (the test settings default to it)")
    server = ApiServer(
        database_url=_database_url() + "?application_name=agentry-body-limit-web",
        name="body-limit-web",
        env={
            "AGENTRY_MAX_BODY_BYTES": str(LIMIT),
            "AGENTRY_MAX_UPLOAD_BODY_BYTES": str(UPLOAD_LIMIT),
            # /v1 carries attachments inline: its limit is the attachment upload's (1001000 here).
            "AGENTRY_ATTACHMENT_MAX_BYTES": "1000",
        },
    ).start()
    yield server
    server.stop()


def _parse(answer: bytes) -> tuple[int, dict, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def _post(server, path: str, *, total: int, chunked: bool, headers: str = "", send_body: bool = True):
    """POST `total` bytes of body to `path` over a raw socket, sending until the server answers.
    Returns (status, headers, body, bytes of body sent when the answer came)."""
    url = urlsplit(server.base_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}{framing}\r\n\r\n".encode())
    piece = b"x" * (64 * 1024)
    sent, pending, finished = 0, b"", not send_body
    deadline = time.monotonic() + 60
    sock.setblocking(False)
    while time.monotonic() < deadline:
        readable, writable, _ = select.select([sock], [] if finished else [sock], [], 1)
        if readable:
            break
        if not writable:
            continue
        if not pending:
            if sent >= total:
                pending, finished = (b"0\r\n\r\n" if chunked else b""), True
            else:
                data = piece[: total - sent]
                sent += len(data)
                pending = f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data
        try:
            pending = pending[sock.send(pending) :]
        except (BrokenPipeError, ConnectionResetError):
            break
    sock.settimeout(10)
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    status, response_headers, body = _parse(answer)
    return status, response_headers, body, sent


def test_a_declared_length_above_the_limit_is_refused_before_the_body_is_sent(small_limits_server):
    # Not a byte of the body is sent: the answer comes before it, or not at all (read times out).
    status, headers, body, _ = _post(
        small_limits_server, "/api/v1/conversations/", total=3 * 1024**3, chunked=False, send_body=False
    )
    assert status == 413
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert json.loads(body) == {
        "message": f"The request body is larger than {LIMIT} bytes.",
        "extra": {"limit": LIMIT},
    }


def test_a_chunked_body_is_refused_while_it_arrives_not_after(small_limits_server):
    total = 64 * 1024 * 1024
    status, _, body, sent = _post(
        small_limits_server,
        "/api/v1/conversations/",
        total=total,
        chunked=True,
        headers="Content-Type: application/json\r\nAccept-Language: zh-CN,zh;q=0.9\r\n",
    )
    # Anonymous: before this limit, the whole body was read (and spooled to disk) for a 401.
    assert status == 413
    assert json.loads(body) == {"message": f"请求体超过了 {LIMIT} 字节。", "extra": {"limit": LIMIT}}
    # The answer came while the client was still sending: only what the sockets' buffers hold
    # had gone out past the limit.
    assert sent < total // 2


def test_an_async_view_is_limited_too_in_openais_error_shape(small_limits_server):
    status, _, body, sent = _post(small_limits_server, "/v1/chat/completions", total=32 * 1024 * 1024, chunked=True)
    assert status == 413
    error = json.loads(body)["error"]
    assert (error["code"], error["type"]) == ("request_too_large", "invalid_request_error")
    assert sent < 16 * 1024 * 1024


def test_a_body_within_the_limit_is_served(small_limits_server):
    response = httpx.post(f"{small_limits_server.base_url}/api/v1/conversations/", content=b"{}" + b" " * (LIMIT - 2))
    assert response.status_code == 401  # read whole and handed to the view, which wants a token


def test_the_knowledge_admin_forms_take_a_file_up_to_the_upload_limit_with_a_session(small_limits_server):
    path = "/admin/knowledge/document/add/"
    files = {"upload": ("doc.txt", b"a" * (UPLOAD_LIMIT - 10_000), "text/plain")}
    with_session = httpx.post(
        small_limits_server.base_url + path, files=files, cookies={"sessionid": "not-checked-here"}
    )
    # Past the body limit: Django's own answer (no CSRF token), not the 413.
    assert with_session.status_code == 403 and "CSRF" in with_session.text

    anonymous = httpx.post(small_limits_server.base_url + path, files=files)
    assert anonymous.status_code == 413

    status, _, body, _ = _post(
        small_limits_server,
        path,
        total=UPLOAD_LIMIT + 1,
        chunked=False,
        headers="Cookie: sessionid=not-checked-here\r\n",
        send_body=False,
    )
    assert status == 413 and json.loads(body)["extra"] == {"limit": UPLOAD_LIMIT}
