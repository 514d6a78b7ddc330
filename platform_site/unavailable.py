"""A dependency outage is a 503 in the API's error shape, not a hang and an HTML 500.

The database (a refused connection, an exhausted pool wait), Redis and the broker can each be
down while the web process is fine; the client is told to retry, and the operator gets one
warning line instead of a traceback per request.
"""

import logging

import redis
from django.db import InterfaceError, OperationalError
from django.utils.deprecation import MiddlewareMixin
from django.utils.translation import gettext as _
from kombu.exceptions import OperationalError as BrokerError

from platform_site.error_responses import error_json

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5

DEPENDENCY_ERRORS: dict[type[Exception], str] = {
    OperationalError: "database",
    InterfaceError: "database",
    redis.RedisError: "redis",
    BrokerError: "broker",
}


def unavailable_dependency(exc: Exception) -> str | None:
    """Which dependency `exc` says is down, or None when it is some other error."""
    for error_class, name in DEPENDENCY_ERRORS.items():
        if isinstance(exc, error_class):
            return name
    return None


def unavailable_body(dependency: str) -> dict:
    return {
        "message": _("The service is temporarily unavailable (%(dependency)s); try again shortly.")
        % {"dependency": dependency},
        "extra": {"unavailable": dependency},
    }


def unavailable_response(request, exception):
    """The 503 for a request that failed because a dependency is down, or None for any other error."""
    dependency = unavailable_dependency(exception)
    if dependency is None:
        return None
    log.warning("%s %s: %s unavailable: %s", request.method, request.path, dependency, exception)
    body = unavailable_body(dependency)
    return error_json(
        request,
        503,
        body["message"],
        code="service_unavailable",
        extra=body["extra"],
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


class DependencyUnavailableMiddleware(MiddlewareMixin):
    """The same 503 for views outside DRF (chat completions, event streams, pages); DRF views
    get it from the API exception handler."""

    def process_exception(self, request, exception):
        return unavailable_response(request, exception)
