"""End-user tokens: who is speaking in a widget, signed by the application's backend.

A token is a JWT signed with HS256 and the widget's secret, with the claims
`{"w": "<widget id>", "u": "<end user id>", "exp": <unix seconds>}` (docs/widget.md has the
recipe in Python and Node). JWT rather than Django's signing: the application's backend is
rarely Django, and every language has an HS256 JWT library. A token lives at most
MAX_LIFETIME_SECONDS: it rides in URLs (the event stream's ?token=), so a leaked one must
expire soon, and a backend that signs one for a day is refused rather than trusted.
"""

import time

import jwt
from django.utils.translation import gettext as _

from conversations.end_users import EndUserInvalid, end_user_clean
from widgets.models import Widget

ALGORITHM = "HS256"
MAX_LIFETIME_SECONDS = 3600
# Clocks of two servers differ a little; more than this is a wrong clock or a stale token.
LEEWAY_SECONDS = 30


class TokenRefused(Exception):
    """The token does not name an end user of this widget; `status` is 401 or 403."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def end_user_token_sign(*, widget: Widget, end_user: str, lifetime: int = 600, now: float | None = None) -> str:
    """What the application's backend does (tests and Python backends use it)."""
    issued = int(time.time() if now is None else now)
    claims = {"w": str(widget.pk), "u": end_user, "exp": issued + lifetime}
    return jwt.encode(claims, widget.secret, algorithm=ALGORITHM)


def end_user_token_verify(*, widget: Widget, token: str, now: float | None = None) -> str:
    """The end user the token names, or TokenRefused saying why not."""
    if not token:
        raise TokenRefused(401, _("An end-user token is required: sign one with the widget's secret."))
    now = time.time() if now is None else now
    try:
        claims = jwt.decode(
            token,
            widget.secret,
            algorithms=[ALGORITHM],
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "w", "u"], "verify_iat": False, "verify_nbf": False},
        )
    except jwt.ExpiredSignatureError:
        raise TokenRefused(401, _("The end-user token has expired: ask the application for a new one.")) from None
    except jwt.InvalidSignatureError:
        raise TokenRefused(401, _("The end-user token is not signed with this widget's secret.")) from None
    except jwt.MissingRequiredClaimError as exc:
        raise TokenRefused(401, _("The end-user token lacks the claim %(claim)s.") % {"claim": exc.claim}) from None
    except jwt.InvalidTokenError:
        raise TokenRefused(401, _("The end-user token is not a JWT signed with HS256.")) from None
    if claims["w"] != str(widget.pk):
        raise TokenRefused(403, _("The end-user token was signed for another widget."))
    if not isinstance(claims["exp"], int) or claims["exp"] - now > MAX_LIFETIME_SECONDS + LEEWAY_SECONDS:
        raise TokenRefused(
            401,
            _("The end-user token must expire within %(seconds)s seconds of now.") % {"seconds": MAX_LIFETIME_SECONDS},
        )
    if not isinstance(claims["u"], str):
        raise TokenRefused(401, _("The end-user token's u claim must be a string."))
    try:
        end_user = end_user_clean(claims["u"])
    except EndUserInvalid as exc:
        raise TokenRefused(401, _("The end-user token's u claim: %(error)s") % {"error": exc}) from None
    if not end_user:
        raise TokenRefused(401, _("The end-user token's u claim is empty."))
    return end_user
