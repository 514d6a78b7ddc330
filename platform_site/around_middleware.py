"""Middleware that wraps each request in a context, in the mode of the chain below it.

Under ASGI a sync-only middleware runs in a thread and blocks that thread until the async view
below it has returned (an event stream, a chat completion waiting for its run): async-capable
middleware keeps such a request off every thread. A subclass says what surrounds the request
(`around`) and what it adds to the response (`finish`); this class runs them in either mode.
"""

import contextlib

from asgiref.sync import iscoroutinefunction, markcoroutinefunction


class AroundMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        with self.around(request):
            response = self.get_response(request)
        return self.finish(request, response)

    async def _acall(self, request):
        with self.around(request):
            response = await self.get_response(request)
        return self.finish(request, response)

    def around(self, request) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def finish(self, request, response):
        return response
