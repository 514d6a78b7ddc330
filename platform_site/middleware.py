"""Middleware that runs on the event loop under ASGI: WhiteNoise, Django's own middleware whose
hooks only read and write the request and the response (those the deploy checks do not look for
by name), and wrong methods answered before CSRF checking.

Django runs a sync-only middleware in a thread and, under ASGI, blocks that thread until the
async view below it has returned. WhiteNoise's lookup for a request that is not a static file
is a dictionary miss, so it can run on the event loop; then a request that waits (a chat
completion waiting for its run) holds no thread.

An async-capable Django middleware (MiddlewareMixin) still hands each of its hooks to a thread
and back, even one that only sets a header: for an async view (a chat completion, an event
stream, the export) that was 18 hand-overs of some 0.4 ms each before the view ran and after
it returned, on the path of every single run answered through /v1/chat/completions (measured).
The subclasses below run those hooks on the loop instead; saving a session or the messages
(the database) still goes to a thread, as Django does, when there is something to save.
SecurityMiddleware, CsrfViewMiddleware and XFrameOptionsMiddleware stay Django's own classes
(6 of the 18 hand-overs): `manage.py check --deploy` finds them by their dotted path, and would
skip its HSTS, SSL-redirect and secure-cookie checks for a subclass.
"""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessionMiddleware
from django.middleware.common import CommonMiddleware as DjangoCommonMiddleware
from django.middleware.locale import LocaleMiddleware as DjangoLocaleMiddleware
from whitenoise.middleware import WhiteNoiseMiddleware

from platform_site.error_responses import method_not_allowed


class AsyncWhiteNoiseMiddleware(WhiteNoiseMiddleware):
    sync_capable = True
    async_capable = True

    def __init__(self, get_response=None, **kwargs):
        super().__init__(get_response, **kwargs)
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request):
        if self.autorefresh:
            # Development only: finding a file touches the disk, so not on the event loop.
            static_file = await sync_to_async(self.find_file, thread_sensitive=False)(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:
            return self.serve(static_file, request)
        return await self.get_response(request)


def _allowed_methods(view) -> frozenset | None:
    """The methods a view answers, when it says so: views decorated with platform_site.http_methods,
    DRF viewsets (by their actions) and class-based views, DRF's or Django's (by their handlers).
    Other views (the admin's) are left to themselves."""
    if hasattr(view, "allowed_methods"):
        return view.allowed_methods
    view_class = getattr(view, "view_class", None)
    if view_class is None:
        return None
    actions = getattr(view, "actions", None)
    names = set(actions) if actions else {m for m in view_class.http_method_names if hasattr(view_class, m)}
    if "get" in names:
        names.add("head")
    if hasattr(view_class, "options"):
        names.add("options")
    return frozenset(name.upper() for name in names)


class MethodNotAllowedMiddleware:
    """A JSON 405 for a method the view does not take, before CsrfViewMiddleware (which must come
    after it) would answer an unsafe one with its HTML page. It only reads the view, so it runs
    on the event loop under ASGI."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)
            self.process_view = self._aprocess_view
        else:
            self.process_view = self._process_view

    def __call__(self, request):
        return self.get_response(request)

    def _process_view(self, request, view, args, kwargs):
        allowed = _allowed_methods(view)
        if allowed is not None and request.method not in allowed:
            return method_not_allowed(request, allowed)
        return None

    async def _aprocess_view(self, request, view, args, kwargs):
        return self._process_view(request, view, args, kwargs)


class HooksOnTheLoop:
    """For a MiddlewareMixin whose process_request and process_response touch nothing but the
    request, the response and settings (no database, file or network): under ASGI they are
    called on the event loop, as they would be on the request's thread under WSGI."""

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response


class LocaleMiddleware(HooksOnTheLoop, DjangoLocaleMiddleware):
    """The language from the cookie or Accept-Language (no session read since Django 4.0)."""


class CommonMiddleware(HooksOnTheLoop, DjangoCommonMiddleware):
    """Slash and www redirects (a URL resolution), Content-Length."""


class AuthenticationMiddleware(HooksOnTheLoop, DjangoAuthenticationMiddleware):
    """Only sets up the lazy request.user and request.auser; the session is read when they are."""


class SavesOnAThread:
    """For a MiddlewareMixin whose process_request only sets up a lazy store and whose
    process_response may save it (the database): the request hook on the loop, the response
    hook on a thread when the subclass's `_saves(request)` says so, else on the loop too."""

    async def __acall__(self, request):
        self.process_request(request)
        response = await self.get_response(request)
        if self._saves(request):
            return await sync_to_async(self.process_response, thread_sensitive=True)(request, response)
        return self.process_response(request, response)


class SessionMiddleware(SavesOnAThread, DjangoSessionMiddleware):
    """Nothing is read until the session is; its response hook saves only a modified session, or
    every one with SESSION_SAVE_EVERY_REQUEST (else it sets the cookie and Vary headers)."""

    def _saves(self, request) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class MessageMiddleware(SavesOnAThread, DjangoMessageMiddleware):
    """Its response hook stores messages (in the session, which may mean reading it from the
    database) only when some were read or added."""

    def _saves(self, request) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)
