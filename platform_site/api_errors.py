"""One error shape for the whole API: {"message": "...", "extra": {...}}.

DRF's own exceptions and Django's Http404/PermissionDenied are turned into it; anything
else is a bug and stays a 500 (logged by Django), never a silent success. The OpenAI-compatible
endpoints under /v1/ answer in OpenAI's shape instead, because that is what OpenAI clients read.
"""

import logging
import sys

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from platform_site.crypto import SecretDecryptionError
from platform_site.error_responses import OPENAI_PREFIX, error_json
from platform_site.refusals import InputRefused, LimitReached
from platform_site.unavailable import (
    RETRY_AFTER_SECONDS,
    unavailable_body,
    unavailable_dependency,
    unavailable_response,
)


class ApiConflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = gettext_lazy("The request conflicts with the current state.")
    default_code = "conflict"


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = gettext_lazy("The request body is too large.")
    default_code = "request_too_large"

    @classmethod
    def over_limit(cls) -> "RequestTooLarge":
        return cls(
            _("The request body is larger than %(count)s bytes.") % {"count": settings.DATA_UPLOAD_MAX_MEMORY_SIZE}
        )


class BadInput(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = gettext_lazy("The request cannot be taken as it is.")
    default_code = "invalid"


class SecretUnreadable(exceptions.APIException):
    """A stored secret (a widget's, a hook's) that the configured keys cannot decrypt: the
    request cannot be checked until its owner rotates it. The operator's side of it is a logged
    error and the admin's "Unreadable" field; the caller is told it is not their fault."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = gettext_lazy(
        "A secret this request needs cannot be read with the server's encryption keys, so the request "
        "cannot be checked. Its owner must rotate the secret in the admin."
    )
    default_code = "secret_unreadable"


log = logging.getLogger(__name__)


def _first_message(detail) -> str:
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    if isinstance(detail, dict) and detail:
        field, value = next(iter(detail.items()))
        inner = _first_message(value)
        return inner if field in ("non_field_errors", "detail") else f"{field}: {inner}"
    return str(detail)


def api_exception_handler(exc, context):
    dependency = unavailable_dependency(exc)
    if dependency is not None:
        return Response(
            unavailable_body(dependency),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, SecretDecryptionError):
        # Whichever object's secret it was, the view that loaded it is named in the traceback.
        log.error(
            "A request was refused: a stored secret cannot be decrypted with the configured keys "
            "(AGENTRY_ENCRYPTION_KEYS); rotate it in the admin (%s)",
            context.get("view").__class__.__name__,
            exc_info=exc,
        )
        exc = SecretUnreadable()
    elif isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge.over_limit()
    elif isinstance(exc, InputRefused):
        # An attachment refused, or a part the agent's model cannot take, whichever view posted it.
        exc = BadInput(detail=exc.message, code=exc.code)
    elif isinstance(exc, LimitReached):
        # A limit of admission (engine.admission_limits), whichever view's post reached it.
        exc = exceptions.Throttled(wait=exc.retry_after, detail=exc.message)
    # A form body with too many parts: Django refuses it while DRF parses, as a SuspiciousOperation
    # that would otherwise be Django's HTML page.
    elif isinstance(exc, TooManyFieldsSent):
        count = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        exc = exceptions.ParseError(_("The request has more than %(count)s fields.") % {"count": count})
    elif isinstance(exc, TooManyFilesSent):
        count = settings.DATA_UPLOAD_MAX_NUMBER_FILES
        exc = exceptions.ParseError(_("The request has more than %(count)s files.") % {"count": count})
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        body = {"message": _first_message(exc.detail), "extra": {"fields": exc.detail}}
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        body = {"message": _first_message(detail), "extra": {}}
        if isinstance(detail, dict):
            body["extra"] = {k: v for k, v in detail.items() if k != "detail"}
    return Response(
        body,
        status=response.status_code,
        headers={
            k: v for k, v in response.headers.items() if k.lower() in ("www-authenticate", "retry-after", "allow")
        },
    )


def server_error(request):
    """Django's 500 handler. An outage met after the view (the session saved on the way out of an
    admin page, say) never reaches the middleware's process_exception, so it is recognised here
    and answered as the same 503."""
    return unavailable_response(request, sys.exc_info()[1]) or defaults.server_error(request)


def not_found(request, exception):
    """A URL under /api/ or /v1/ that matches no route (say, a malformed id) answers in the
    API's error shape too; anywhere else it is Django's page."""
    if request.path.startswith(("/api/", OPENAI_PREFIX)):
        return error_json(request, 404, _("Not found."), code="not_found")
    return defaults.page_not_found(request, exception)
