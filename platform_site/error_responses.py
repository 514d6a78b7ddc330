"""Error responses for views outside DRF, in the shape the client of the URL reads: the API's
`{"message": ..., "extra": ...}`, or OpenAI's `{"error": {...}}` under /v1/.

Free of DRF imports: middleware loads it before DRF's settings are read.
"""

from django.http import JsonResponse
from django.utils.translation import gettext as _

OPENAI_PREFIX = "/v1/"


def error_json(
    request, status: int, message: str, *, code: str, extra: dict | None = None, headers: dict | None = None
) -> JsonResponse:
    """An error in the shape the client of this URL reads."""
    if request.path.startswith(OPENAI_PREFIX):
        error_type = "invalid_request_error" if status < 500 else "server_error"
        body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    else:
        body = {"message": message, "extra": extra or {}}
    return JsonResponse(body, status=status, headers=headers)


def method_not_allowed(request, allowed) -> JsonResponse:
    allowed = sorted(allowed)
    return error_json(
        request,
        405,
        _('Method "%(method)s" not allowed.') % {"method": request.method},
        code="method_not_allowed",
        extra={"allowed": allowed},
        headers={"Allow": ", ".join(allowed)},
    )
