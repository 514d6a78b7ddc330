"""Authentication, throttling and errors for the async (streaming) views, which DRF cannot
serve: the same token and session rules, the same throttles, the same error shape."""

import math
from types import SimpleNamespace

from django.http import JsonResponse
from django.utils.translation import gettext as _
from rest_framework import exceptions

from api.auth import ApiTokenAuthentication
from platform_site.asyncdb import db
from workspaces.access import session_attach


class AsyncApiError(Exception):
    def __init__(
        self, status: int, message: str, *, code: str = "", param: str | None = None, headers: dict | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}

    def response(self) -> JsonResponse:
        """In the API's error contract."""
        extra = {"fields": {self.param: [self.message]}} if self.param else {}
        return JsonResponse({"message": self.message, "extra": extra}, status=self.status, headers=self.headers)


def token_user(request):
    """The user of the request's API token, or the 401 to answer: the synchronous part of
    `authenticate`, for a view that does the rest of its database work in the same hop."""
    auth = ApiTokenAuthentication()
    challenge = {"WWW-Authenticate": auth.authenticate_header(request)}
    try:
        result = auth.authenticate(request)
    except exceptions.AuthenticationFailed as exc:
        raise AsyncApiError(401, str(exc.detail), code="invalid_api_key", headers=challenge) from None
    if result is None:
        raise AsyncApiError(
            401, _("Authentication credentials were not provided."), code="missing_api_key", headers=challenge
        )
    return result[0]


async def authenticate(request, *, allow_session: bool):
    """The request's user: its API token's, or with `allow_session` (no token sent) its session's."""
    try:
        return await db(token_user, request)
    except AsyncApiError as exc:
        if not allow_session or exc.code != "missing_api_key":
            raise
        missing = exc
    user = await request.auser()
    if user.is_authenticated:
        # A signed-in person's stream is of the workspace they chose in the header (as every
        # other page of theirs), not merely their first.
        return session_attach(user, request.session)
    raise missing


def throttle_check(request, user, throttle_classes) -> None:
    """Raises the 429 of the first throttle that refuses the request (synchronous: the limiters
    ask Redis or the cache). The limiters are offered to each other as a DRF view's are: the
    first one asked counts the request in every Redis window in one call, so a request one of
    them refuses is still counted in the others' windows, as DRF counts it."""
    request.user = user
    limiters = [throttle_class() for throttle_class in throttle_classes]
    view = SimpleNamespace(get_throttles=lambda: limiters)
    for limiter in limiters:
        if not limiter.allow_request(request, view):
            wait = math.ceil(limiter.wait() or 1)
            raise AsyncApiError(
                429,
                f"Request was throttled. Expected available in {wait} seconds.",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(wait)},
            )


async def throttle(request, user, throttle_classes) -> None:
    await db(throttle_check, request, user, throttle_classes)
