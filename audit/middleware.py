"""Tells the audit where a request's configuration changes come from: the admin, the API or
the operator pages. Only a context variable is set; the user (or API token) is read from the
request when a change is written, after DRF has authenticated it."""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.urls import NoReverseMatch, reverse

from audit.context import SOURCE_ADMIN, SOURCE_API, SOURCE_CONSOLE, Origin, origin_set

_API_PREFIXES = ("/api/", "/v1/")


def _admin_prefix() -> str | None:
    try:
        return reverse("admin:index")
    except NoReverseMatch:
        # A URLconf without the admin.
        return None


def request_source(path: str) -> str:
    admin = _admin_prefix()
    if admin and path.startswith(admin):
        return SOURCE_ADMIN
    if path.startswith(_API_PREFIXES):
        return SOURCE_API
    return SOURCE_CONSOLE


class ConfigAuditMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        with origin_set(Origin(request_source(request.path_info), request=request)):
            return self.get_response(request)

    async def _acall(self, request):
        with origin_set(Origin(request_source(request.path_info), request=request)):
            return await self.get_response(request)
