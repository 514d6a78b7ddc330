"""WhiteNoise as async-capable middleware, and wrong methods answered before CSRF checking.

Django runs a sync-only middleware in a thread and, under ASGI, blocks that thread until the
async view below it has returned. WhiteNoise's lookup for a request that is not a static file
is a dictionary miss, so it can run on the event loop; then a request that waits (a chat
completion waiting for its run) holds no thread.
"""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
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
