"""The web server's application: synchronous views are served by Django's WSGI handler in one
thread hop, async views (streams, chat completions, the streamed export) by its ASGI handler."""

import asyncio
import json
import subprocess
import sys
import threading
import time

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.http import HttpResponse, StreamingHttpResponse
from django.test import override_settings
from django.urls import path

from platform_site.asgi import _served_async, application
from tests.support.factories import make_agent, make_user, token_for


@pytest.mark.parametrize(
    "path, served_async",
    [
        ("/api/v1/conversations/", False),
        ("/api/v1/conversations/3f1c8a52-0000-4000-8000-000000000000/messages/", False),
        ("/admin/login/", False),
        ("/no/such/page/", False),
        ("/v1/chat/completions", True),
        ("/v1/models", True),
        ("/api/v1/runs/export/", True),
        ("/api/v1/runs/3f1c8a52-0000-4000-8000-000000000000/events/", True),
    ],
)
def test_only_coroutine_views_go_to_djangos_asgi_handler(path, served_async):
    assert _served_async({"path": path, "root_path": ""}) is served_async


@pytest.fixture
def headers():
    return {"Authorization": f"Bearer {token_for(make_user())}", "Content-Type": "application/json"}


def test_a_body_sent_in_chunks_is_read_whole(api_server, headers):
    agent = make_agent(slug="chunked")
    body = json.dumps({"agent": agent.slug, "title": "数" * 200, "metadata": {"note": "x" * 3000}}).encode()

    def chunks():
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    # No Content-Length: httpx sends a generator with chunked transfer encoding.
    response = httpx.post(f"{api_server.base_url}/api/v1/conversations/", content=chunks(), headers=headers)
    assert response.status_code == 201, response.text
    assert response.json()["agent"] == "chunked"
    assert response.json()["title"] == "数" * 200
    assert response.json()["metadata"] == {"note": "x" * 3000}


def test_answers_keep_their_status_headers_and_cookies(api_server, headers):
    wrong_method = httpx.delete(f"{api_server.base_url}/api/v1/conversations/", headers=headers)
    assert wrong_method.status_code == 405
    assert "POST" in wrong_method.headers["allow"]
    assert wrong_method.headers["content-type"].startswith("application/json")

    missing = httpx.get(f"{api_server.base_url}/api/v1/runs/not-a-run/", headers=headers)
    assert missing.status_code == 404
    assert "message" in missing.json()

    login = httpx.get(f"{api_server.base_url}/admin/login/")
    assert login.status_code == 200
    assert "csrftoken" in login.cookies
    assert login.headers["x-frame-options"] == "DENY"
    assert "<form" in login.text

    head = httpx.head(f"{api_server.base_url}/health/")
    assert head.status_code == 200
    assert head.content == b""


async def _counted():
    for n in range(3):
        yield f"async {n}\n".encode()


def _sync_stream(request):
    return StreamingHttpResponse((f"line {n}\n".encode() for n in range(1000)), content_type="text/plain")


def _async_stream(request):
    return StreamingHttpResponse(_counted(), content_type="text/plain")


class _InFlight:
    def __init__(self):
        self.lock = threading.Lock()
        self.now = self.most = 0


_in_flight = _InFlight()


def _slow(request):
    with _in_flight.lock:
        _in_flight.now += 1
        _in_flight.most = max(_in_flight.most, _in_flight.now)
    time.sleep(0.05)  # long enough for the other requests to arrive meanwhile
    with _in_flight.lock:
        _in_flight.now -= 1
    return HttpResponse("done")


urlpatterns = [path("sync-stream/", _sync_stream), path("async-stream/", _async_stream), path("slow/", _slow)]


@override_settings(ROOT_URLCONF=__name__)
def test_streamed_answers_of_synchronous_views_arrive_whole():
    """A stream of a plain iterator is relayed from the request's thread; a stream of an async
    iterator (the admin's export) is read on the loop, as Django's ASGI handler reads it."""

    @async_to_sync
    async def get(url: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await client.get(url)

    plain = get("/sync-stream/")
    assert plain.status_code == 200
    assert plain.text == "".join(f"line {n}\n" for n in range(1000))
    from_async = get("/async-stream/")
    assert from_async.status_code == 200
    assert from_async.text == "async 0\nasync 1\nasync 2\n"


@override_settings(ROOT_URLCONF=__name__, AGENTRY_WEB_REQUEST_THREADS=2)
def test_a_process_serves_at_most_its_request_threads_at_once_and_the_rest_wait():
    _in_flight.most = 0

    @async_to_sync
    async def many() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await asyncio.gather(*(client.get("/slow/") for _ in range(6)))

    answers = many()
    assert [answer.status_code for answer in answers] == [200] * 6
    assert all(answer.text == "done" for answer in answers)
    assert _in_flight.most == 2


def test_the_urlconf_is_loaded_when_the_process_starts_not_by_its_first_request():
    """A fresh process that only imports the application has every view imported already."""
    probe = (
        "import sys, platform_site.asgi; "
        "print(all(name in sys.modules for name in ('platform_site.urls', 'api.urls', 'console.urls')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip().splitlines()[-1] == "True"
