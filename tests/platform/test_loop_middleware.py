"""Django's middleware under ASGI with its hooks on the event loop (platform_site.middleware):
the hooks still run and still protect (headers, CSRF, sessions), on the loop, except a
session or messages to save, which go to a thread as Django sends them."""

import asyncio

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.contrib import messages
from django.contrib.messages.storage.fallback import FallbackStorage
from django.contrib.sessions.models import Session
from django.http import HttpResponse
from django.test import RequestFactory

from platform_site import middleware
from platform_site.asgi import application
from tests.api_helpers import make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)


def _on_loop() -> bool:
    return asyncio._get_running_loop() is not None


@pytest.fixture
def hook_threads(monkeypatch):
    """For each spied hook, whether each call ran on the event loop."""
    seen: dict[str, list[bool]] = {}
    for cls, hook in [
        (middleware.SecurityMiddleware, "process_response"),
        (middleware.LocaleMiddleware, "process_request"),
        (middleware.CommonMiddleware, "process_response"),
        (middleware.CsrfViewMiddleware, "process_request"),
        (middleware.AuthenticationMiddleware, "process_request"),
        (middleware.XFrameOptionsMiddleware, "process_response"),
        (middleware.SessionMiddleware, "process_response"),
        (middleware.MessageMiddleware, "process_response"),
    ]:
        original = getattr(cls, hook)
        name = f"{cls.__name__}.{hook}"

        def spy(self, *args, _original=original, _name=name):
            seen.setdefault(_name, []).append(_on_loop())
            return _original(self, *args)

        monkeypatch.setattr(cls, hook, spy)
    return seen


def _get(path: str, headers: dict) -> httpx.Response:
    """Through the web server's application (platform_site.asgi), as uvicorn serves it."""

    async def get():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get(path, headers=headers)

    return async_to_sync(get)()


def test_an_async_views_middleware_hooks_run_on_the_loop_and_still_set_their_headers(hook_threads):
    headers = {"Authorization": f"Bearer {token_for(make_user())}", "Accept-Language": "zh-hans"}
    response = _get("/v1/models", headers)
    assert response.status_code == 200, response.content
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Content-Language"] == "zh-hans"
    assert "Accept-Language" in response.headers["Vary"]
    assert len(hook_threads) == 8
    assert all(calls == [True] for calls in hook_threads.values()), hook_threads


def test_a_synchronous_view_runs_the_same_hooks_on_its_request_thread(hook_threads):
    headers = {"Authorization": f"Bearer {token_for(make_user())}"}
    response = _get("/api/v1/agents/", headers)
    assert response.status_code == 200, response.content
    assert response.headers["X-Frame-Options"] == "DENY"
    assert all(calls == [False] for calls in hook_threads.values()), hook_threads


def _async_chain(view):
    """The session and message middleware around an async view, as Django's ASGI handler builds them."""

    async def get_response(request):
        return await view(request)

    return middleware.SessionMiddleware(middleware.MessageMiddleware(get_response))


def test_a_modified_session_is_saved_from_a_thread_and_an_untouched_one_not_at_all(monkeypatch):
    saved_on_loop = []
    original = middleware.SessionMiddleware.process_response

    def spy(self, request, response):
        saved_on_loop.append((request.session.modified, _on_loop()))
        return original(self, request, response)

    monkeypatch.setattr(middleware.SessionMiddleware, "process_response", spy)

    async def writes(request):
        request.session["seen"] = "yes"
        return HttpResponse("ok")

    async def reads_nothing(request):
        return HttpResponse("ok")

    response = async_to_sync(_async_chain(writes))(RequestFactory().get("/"))
    key = response.cookies["sessionid"].value
    assert Session.objects.get(session_key=key).get_decoded() == {"seen": "yes"}
    response = async_to_sync(_async_chain(reads_nothing))(RequestFactory().get("/"))
    assert "sessionid" not in response.cookies
    assert saved_on_loop == [(True, False), (False, True)]


def test_messages_added_in_an_async_view_are_stored(monkeypatch):
    stored_on_loop = []
    original = middleware.MessageMiddleware.process_response

    def spy(self, request, response):
        stored_on_loop.append(_on_loop())
        return original(self, request, response)

    monkeypatch.setattr(middleware.MessageMiddleware, "process_response", spy)

    async def adds(request):
        messages.info(request, "saved")
        return HttpResponse("ok")

    response = async_to_sync(_async_chain(adds))(RequestFactory().get("/"))
    assert stored_on_loop == [False]
    # The fallback storage keeps a small message in its cookie.
    request = RequestFactory().get("/")
    request.COOKIES["messages"] = response.cookies["messages"].value
    request.session = {}
    assert [str(m) for m in FallbackStorage(request)] == ["saved"]


def test_csrf_is_still_checked_on_the_loop_for_an_async_view():
    async def view(request):
        return HttpResponse("ok")

    csrf = middleware.CsrfViewMiddleware(view)
    assert asyncio.iscoroutinefunction(csrf.process_view)
    factory = RequestFactory()
    forged = factory.post("/", {"x": "1"})
    csrf.process_request(forged)
    refused = async_to_sync(csrf.process_view)(forged, view, (), {})
    assert refused is not None and refused.status_code == 403
    token_request = factory.get("/")
    csrf.process_request(token_request)
    from django.middleware.csrf import get_token

    token = get_token(token_request)
    secret_cookie = csrf.process_response(token_request, HttpResponse()).cookies["csrftoken"].value
    allowed = factory.post("/", {"csrfmiddlewaretoken": token})
    allowed.COOKIES["csrftoken"] = secret_cookie
    csrf.process_request(allowed)
    assert async_to_sync(csrf.process_view)(allowed, view, (), {}) is None


def test_csrf_secrets_in_the_session_are_refused(settings):
    settings.CSRF_USE_SESSIONS = True
    with pytest.raises(Exception, match="cookie"):
        middleware.CsrfViewMiddleware(lambda request: HttpResponse())
