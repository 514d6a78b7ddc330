"""Failed-login limits for the admin and approval login pages.

Failures are counted per username and client address in the default cache (Redis in
production, so every web process shares them): past AGENTRY_LOGIN_FAILURE_LIMIT within
AGENTRY_LOGIN_FAILURE_WINDOW_SECONDS, that pair is refused even with the right password until
the window ends. A success clears the count. Counting the pair, not the address alone, keeps
one office behind a NAT from locking each other out.
"""

import hashlib

import redis
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from platform_site.redis_failure import counters_fail_open

KEY_PREFIX = "agentry:login-failures:"


def _key(username: str, address: str) -> str:
    pair = f"{username.strip().lower()}\0{address}".encode()
    return KEY_PREFIX + hashlib.sha256(pair).hexdigest()


def _record_failure(key: str) -> None:
    window = settings.AGENTRY_LOGIN_FAILURE_WINDOW_SECONDS
    # The window starts at the first failure; later ones count within it without extending it.
    if not cache.add(key, 1, window):
        try:
            cache.incr(key)
        except ValueError:  # expired between the two calls
            cache.set(key, 1, window)


class LoginThrottleMixin:
    """For an AuthenticationForm built with the request (Django's login views pass it)."""

    throttle_messages = {
        "too_many_failures": _(
            "Too many failed logins for this account from your address. Try again in %(minutes)d minutes."
        ),
        "counter_unavailable": _("Logging in is unavailable at the moment. Try again shortly."),
        "local_login_off": _("Signing in with a password is turned off here. Use single sign-on."),
    }

    def clean(self):
        # AGENTRY_LOCAL_LOGIN off: only single sign-on signs in (docs/sso.md); the password is
        # not even checked.
        if not settings.AGENTRY_LOCAL_LOGIN:
            raise ValidationError(self.throttle_messages["local_login_off"], code="local_login_off")
        address = self.request.META.get("REMOTE_ADDR", "") if self.request else ""
        key = _key(self.cleaned_data.get("username") or "", address)
        try:
            failures = cache.get(key, 0)
        except redis.RedisError as exc:
            if not counters_fail_open(exc, counter="login failure count"):
                raise ValidationError(self.throttle_messages["counter_unavailable"], code="counter_unavailable")
            return super().clean()
        if failures >= settings.AGENTRY_LOGIN_FAILURE_LIMIT:
            raise ValidationError(
                self.throttle_messages["too_many_failures"],
                code="too_many_failures",
                params={"minutes": max(1, settings.AGENTRY_LOGIN_FAILURE_WINDOW_SECONDS // 60)},
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            self._count(_record_failure, key)
            raise
        if failures:
            self._count(cache.delete, key)
        return cleaned

    @staticmethod
    def _count(operation, key: str) -> None:
        # The password check has already been answered; losing one count to an outage is
        # better than turning the answer into an error.
        try:
            operation(key)
        except redis.RedisError as exc:
            counters_fail_open(exc, counter="login failure count")


class ThrottledAuthenticationForm(LoginThrottleMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(LoginThrottleMixin, AdminAuthenticationForm):
    pass
