"""A request refused by a limit that lifts with time, raised below the interfaces
(engine.admission_limits) and answered once by each of them: the API's error layer (a 429 with
Retry-After, platform_site.api_errors and LimitReachedMiddleware), a schedule's fire row, the
CLI's message and exit status."""

from django.utils.deprecation import MiddlewareMixin

from platform_site.error_responses import OPENAI_PREFIX, error_json


class LimitReached(Exception):
    """`message` says which limit and why; `retry_after` is the seconds until it may pass."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.message, self.retry_after = message, retry_after


class LimitReachedMiddleware(MiddlewareMixin):
    """The 429 for the API's views outside DRF (chat completions under /v1/, in OpenAI's shape);
    DRF views get it from the API exception handler. Other pages handle it themselves."""

    def process_exception(self, request, exception):
        if not isinstance(exception, LimitReached) or not request.path.startswith(("/api/", OPENAI_PREFIX)):
            return None
        return error_json(
            request,
            429,
            exception.message,
            code="rate_limit_exceeded",
            headers={"Retry-After": str(exception.retry_after)},
        )
