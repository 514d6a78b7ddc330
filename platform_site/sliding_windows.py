"""Sliding windows of requests in the default cache's Redis (DRF's window: the times of the
requests let through in the last `duration` seconds, as a sorted set), shared by the API's rates
(api.throttles) and the agents' limits per end user (engine.admission_limits), so every process
counts against the same budget. Without Redis (the embedded setup, one process) a window is a
list in the cache, as DRF keeps it."""

import os
import secrets

import redis
from django.conf import settings
from django.core.cache import cache
from redis.commands.core import Script

from platform_site.redis_failure import counters_fail_open

# Trimmed, checked and extended in one atomic step: concurrent requests in two processes cannot
# overwrite each other's entries as DRF's read-then-write of a list can. One call keeps every
# window a request is counted in (KEYS, with a duration and a limit each in ARGV after the time
# and the member): a post counts against two budgets in one round trip. Returns (let through,
# requests in the window, oldest) for each window.
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


def sliding_windows() -> Script | None:
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


def window_wait(*, duration: float, limit: int, count: int, now: float, oldest: float) -> float | None:
    """DRF's estimate of the seconds until a refused request may pass, from the window it saw
    (None: no estimate)."""
    available = limit - count + 1
    if available <= 0:
        return None
    return (duration - (now - oldest)) / available


def window_admit(*, key: str, duration: float, limit: int, now: float, counter: str) -> float | None:
    """Counts a request at `now` (seconds) in the window `key` and returns None when it is let
    through; else the seconds to wait (at least 1), and it is not counted. While Redis is
    unreachable the request follows AGENTRY_REDIS_FAILURE (`counter` names the window in the
    warning): let through uncounted, or the RedisError is raised (a 503 for the API)."""
    try:
        script = sliding_windows()
        if script is None:
            return _cache_window_admit(key=key, duration=duration, limit=limit, now=now)
        args = [repr(now), f"{now}:{secrets.token_hex(4)}", duration, limit]
        [(allowed, count, oldest)] = script(keys=[f"agentry:{key}"], args=args)
    except redis.RedisError as exc:
        if counters_fail_open(exc, counter=counter):
            return None
        raise
    if allowed:
        return None
    return max(1.0, window_wait(duration=duration, limit=limit, count=count, now=now, oldest=float(oldest)) or 1.0)


def _cache_window_admit(*, key: str, duration: float, limit: int, now: float) -> float | None:
    # DRF's SimpleRateThrottle: newest first, trimmed from the end.
    history = cache.get(key, [])
    while history and history[-1] <= now - duration:
        history.pop()
    if len(history) >= limit:
        oldest = history[-1] if history else now
        return max(1.0, window_wait(duration=duration, limit=limit, count=len(history), now=now, oldest=oldest) or 1.0)
    history.insert(0, now)
    cache.set(key, history, duration)
    return None
