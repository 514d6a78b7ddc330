"""Per-user request rates: per API token, per run start, per hook, per widget. Counters live in
the default cache's Redis when it has one (platform_site.sliding_windows), so every web process
counts against the same budget; otherwise (the embedded setup, a single web process) in the
cache, as DRF keeps them. While Redis is unreachable the counters follow AGENTRY_REDIS_FAILURE:
uncounted requests (open) or a 503 (closed). An agent's limits per end user are not rates of a
way in but rules of admission: engine.admission_limits."""

import secrets

import redis
from django.conf import settings
from redis.commands.core import Script
from rest_framework.throttling import UserRateThrottle

from platform_site.redis_failure import counters_fail_open
from platform_site.sliding_windows import sliding_windows, window_wait


class _CacheOutageThrottle(UserRateThrottle):
    _counted: tuple[int, float] | None = None  # (requests in the window, the oldest's time)

    def allow_request(self, request, view):
        try:
            script = sliding_windows()
            if script is None or self.rate is None:
                return super().allow_request(request, view)
            self.key = self.get_cache_key(request, view)
            if self.key is None:
                return True
            self.now, verdicts = _counted(script, request, view, self)
        except redis.RedisError as exc:
            if counters_fail_open(exc, counter=f"API rate limit ({self.scope})"):
                return True
            raise  # the API exception handler answers 503
        allowed, count, oldest = verdicts[self.key]
        self._counted = (count, float(oldest))
        return bool(allowed)

    def wait(self):
        if self._counted is None:
            return super().wait()
        count, oldest = self._counted
        return window_wait(duration=self.duration, limit=self.num_requests, count=count, now=self.now, oldest=oldest)


def _counted(script: Script, request, view, asking: _CacheOutageThrottle) -> tuple[float, dict[str, list]]:
    """The time and each window's verdict, by key, for the request: counted in every Redis window
    of the view's throttles when the first of them asks (DRF asks each in turn, and counts the
    request in every window that lets it through, as this does), then read by the others."""
    known = getattr(request, "_agentry_windows", None)
    if known is not None and asking.key in known[1]:
        return known
    throttles = [asking]
    if view is not None:
        for throttle in view.get_throttles():
            if type(throttle) is not type(asking) and isinstance(throttle, _CacheOutageThrottle) and throttle.rate:
                throttle.key = throttle.get_cache_key(request, view)
                if throttle.key is not None:
                    throttles.append(throttle)
    now = asking.timer()
    args = [repr(now), f"{now}:{secrets.token_hex(4)}"]
    for throttle in throttles:
        args += [throttle.duration, throttle.num_requests]
    verdicts = script(keys=[f"agentry:{throttle.key}" for throttle in throttles], args=args)
    request._agentry_windows = (now, {throttle.key: verdict for throttle, verdict in zip(throttles, verdicts)})
    return request._agentry_windows


class ApiUserThrottle(_CacheOutageThrottle):
    scope = "user"

    def get_rate(self):
        return settings.AGENTRY_API_RATE or None


class RunStartThrottle(_CacheOutageThrottle):
    """Requests that start a run cost model calls: they get a budget of their own."""

    scope = "run_start"

    def get_rate(self):
        return settings.AGENTRY_API_RUN_RATE or None


class HookThrottle(_CacheOutageThrottle):
    """Signed deliveries per hook: each starts a run, which costs model calls. Asked only once the
    signature holds (api.hooks): requests nobody signed count against their sender's address
    (HookFailureThrottle), so they cannot spend the hook's budget and lock its owner out."""

    scope = "hook"

    def get_rate(self):
        return settings.AGENTRY_HOOK_RATE or None

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": view.kwargs["hook_id"]}


class HookFailureThrottle(_CacheOutageThrottle):
    """Requests to hooks refused before a signature held (an unknown hook, no or a wrong
    signature), per client address as DRF reads it: REMOTE_ADDR, or the X-Forwarded-For entry
    AGENTRY_NUM_PROXIES proxies in front of the site added."""

    scope = "hook_failures"

    def get_rate(self):
        return settings.AGENTRY_HOOK_FAILURE_RATE or None

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class WidgetThrottle(_CacheOutageThrottle):
    """Requests per chat widget, from all its end users together (each may start a run): a leaked
    page cannot spend more than this of the agent's model calls, whatever tokens it holds."""

    scope = "widget"

    def get_rate(self):
        return settings.AGENTRY_WIDGET_RATE or None

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": view.kwargs["widget_id"]}
