"""Django's middleware under ASGI with its hooks on the event loop (platform_site.middleware):
the hooks still run (language, sessions, messages), on the loop, except a session or messages to
save, which go to a thread as Django sends them; the security middleware stay Django's own, which
the deploy checks look for by name."""

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
from tests.support.factories import make_user, token_for

pytestmark = pytest.mark.django_db


def _on_loop() -> bool:
    return asyncio._get_running_loop() is not None


@pytest.fixture
def hook_threads(monkeypatch):
    """For each spied hook, whether each call ran on the event loop."""
    seen: dict[str, list[bool]] = {}
    for cls, hook in [
        (middleware.LocaleMiddleware, "process_request"),
        (middleware.CommonMiddleware, "process_response"),
        (middleware.AuthenticationMiddleware, "process_request"),
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


# Commits: the API token is read on a thread of the async view, with a connection of its own.
@pytest.mark.django_db(transaction=True)
def test_an_async_views_middleware_hooks_run_on_the_loop_and_still_set_their_headers(hook_threads):
    headers = {"Authorization": f"Bearer {token_for(make_user())}", "Accept-Language": "zh-hans"}
    response = _get("/v1/models", headers)
    assert response.status_code == 200, response.content
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Content-Language"] == "zh-hans"
    assert "Accept-Language" in response.headers["Vary"]
    assert len(hook_threads) == 5
    assert all(calls == [True] for calls in hook_threads.values()), hook_threads


# Commits: the API token is read on a thread of the async view, with a connection of its own.
@pytest.mark.django_db(transaction=True)
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


def test_the_security_middleware_are_djangos_own_for_the_deploy_checks():
    from django.conf import settings

    for path in (
        "django.middleware.security.SecurityMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
    ):
        assert path in settings.MIDDLEWARE
