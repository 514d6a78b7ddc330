"""Per-user request rates. Counters live in the default cache's Redis when it has one, so every
web process counts against the same budget; otherwise (the embedded setup, a single web
process) in the cache, as DRF keeps them. While Redis is unreachable the counters follow
AGENTRY_REDIS_FAILURE: uncounted requests (open) or a 503 (closed)."""

import os
import secrets

import redis
from django.conf import settings
from redis.commands.core import Script
from rest_framework.throttling import UserRateThrottle

from platform_site.redis_failure import counters_fail_open

# DRF's sliding window (the times of the requests let through in the last `duration` seconds)
# as a sorted set, trimmed, checked and extended in one atomic step: concurrent requests of a
# user in two processes cannot overwrite each other's entries as DRF's read-then-write of a list
# can. One call keeps every window a request is counted in (KEYS, with a duration and a limit
# each in ARGV after the time and the member): a post counts against two budgets in one round
# trip. Returns (let through, requests in the window, oldest) for each window.
_SLIDING_WINDOWS = """
local now, member = tonumber(ARGV[1]), ARGV[2]
local verdicts = {}
for i, key in ipairs(KEYS) do
    local duration, limit = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - duration)
    local count = redis.call('ZCARD', key)
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2] or ARGV[1]
    if count >= limit then
        verdicts[i] = {0, count, oldest}
    else
        redis.call('ZADD', key, ARGV[1], member)
        redis.call('EXPIRE', key, math.ceil(duration))
        verdicts[i] = {1, count + 1, oldest}
    end
end
return verdicts
"""

_windows: tuple[tuple, Script] | None = None


def _sliding_windows() -> Script | None:
    """The script on the default cache's Redis, or None when the cache is not Redis. One client
    per process: Django's cache builds a Redis client for every call, which costs more than
    the round trip."""
    global _windows
    config = settings.CACHES["default"]
    if not config["BACKEND"].endswith(".RedisCache"):
        return None
    identity = (os.getpid(), config["LOCATION"])
    if _windows is None or _windows[0] != identity:
        timeouts = {k: v for k, v in config.get("OPTIONS", {}).items() if k.startswith("socket_")}
        client = redis.Redis.from_url(config["LOCATION"].split(",")[0], **timeouts)
        _windows = (identity, client.register_script(_SLIDING_WINDOWS))
    return _windows[1]


class _CacheOutageThrottle(UserRateThrottle):
    _counted: tuple[int, float] | None = None  # (requests in the window, the oldest's time)

    def allow_request(self, request, view):
        try:
            script = _sliding_windows()
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
        # DRF's estimate, from the window the script saw.
        count, oldest = self._counted
        available = self.num_requests - count + 1
        if available <= 0:
            return None
        return (self.duration - (self.now - oldest)) / available


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
