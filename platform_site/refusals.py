"""A request refused by a limit that lifts with time, raised below the interfaces
(engine.admission_limits) and answered once by each of them: the API's error layer (a 429 with
Retry-After, platform_site.api_errors and LimitReachedMiddleware), a schedule's fire row, the
CLI's message and exit status. Input refused as it is (InputRefused: an attachment the platform
will not keep, a part the agent's model cannot take) is a 400 the same way."""

from django.utils.deprecation import MiddlewareMixin

from platform_site.error_responses import OPENAI_PREFIX, error_json


class LimitReached(Exception):
    """`message` says which limit and why; `retry_after` is the seconds until it may pass."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.message, self.retry_after = message, retry_after


class InputRefused(ValueError):
    """Input refused as it was sent (attachments.sniff.AttachmentRefused and its kin): a 400 whose
    message says why; `code` names the rule."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class LimitReachedMiddleware(MiddlewareMixin):
    """The 429 (and InputRefused's 400) for the API's views outside DRF (chat completions under
    /v1/, in OpenAI's shape); DRF views get it from the API exception handler. Other pages handle
    it themselves."""

    def process_exception(self, request, exception):
        if not request.path.startswith(("/api/", OPENAI_PREFIX)):
            return None
        if isinstance(exception, InputRefused):
            return error_json(request, 400, exception.message, code=exception.code)
        if not isinstance(exception, LimitReached):
            return None
        return error_json(
            request,
            429,
            exception.message,
            code="rate_limit_exceeded",
            headers={"Retry-After": str(exception.retry_after)},
        )
