"""Tells the audit where a request's configuration changes come from: the admin, the API or
the operator pages. Only a context variable is set; the user (or API token) is read from the
request when a change is written, after DRF has authenticated it."""

from django.urls import NoReverseMatch, reverse

from audit.context import SOURCE_ADMIN, SOURCE_API, SOURCE_CONSOLE, Origin, origin_set
from platform_site.around_middleware import AroundMiddleware

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


class ConfigAuditMiddleware(AroundMiddleware):
    def around(self, request):
        return origin_set(Origin(request_source(request.path_info), request=request))
