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
# as a sorted set, trimmed, checked and extended in one atomic step: one round trip, and
# concurrent requests of a user in two processes cannot overwrite each other's entries as
# DRF's read-then-write of a list can. Returns (let through, requests in the window, oldest).
_SLIDING_WINDOW = """
local now, duration, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - duration)
local count = redis.call('ZCARD', KEYS[1])
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or ARGV[1]
if count >= limit then
    return {0, count, oldest}
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('EXPIRE', KEYS[1], math.ceil(duration))
return {1, count + 1, oldest}
"""

_window: tuple[tuple, Script] | None = None


def _sliding_window() -> Script | None:
    """The script on the default cache's Redis, or None when the cache is not Redis. One client
    per process: Django's cache builds a Redis client for every call, which costs more than
    the round trip."""
    global _window
    config = settings.CACHES["default"]
    if not config["BACKEND"].endswith(".RedisCache"):
        return None
    identity = (os.getpid(), config["LOCATION"])
    if _window is None or _window[0] != identity:
        timeouts = {k: v for k, v in config.get("OPTIONS", {}).items() if k.startswith("socket_")}
        client = redis.Redis.from_url(config["LOCATION"].split(",")[0], **timeouts)
        _window = (identity, client.register_script(_SLIDING_WINDOW))
    return _window[1]


class _CacheOutageThrottle(UserRateThrottle):
    _counted: tuple[int, float] | None = None  # (requests in the window, the oldest's time)

    def allow_request(self, request, view):
        try:
            window = _sliding_window()
            if window is None or self.rate is None:
                return super().allow_request(request, view)
            self.key = self.get_cache_key(request, view)
            if self.key is None:
                return True
            self.now = self.timer()
            member = f"{self.now}:{secrets.token_hex(4)}"
            allowed, count, oldest = window(
                keys=[f"agentry:{self.key}"], args=[repr(self.now), self.duration, self.num_requests, member]
            )
        except redis.RedisError as exc:
            if counters_fail_open(exc, counter=f"API rate limit ({self.scope})"):
                return True
            raise  # the API exception handler answers 503
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


class ApiUserThrottle(_CacheOutageThrottle):
    scope = "user"

    def get_rate(self):
        return settings.AGENTRY_API_RATE or None


class RunStartThrottle(_CacheOutageThrottle):
    """Requests that start a run cost model calls: they get a budget of their own."""

    scope = "run_start"

    def get_rate(self):
        return settings.AGENTRY_API_RUN_RATE or None
