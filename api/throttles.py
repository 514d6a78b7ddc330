"""Per-user request rates, and an agent's limits per end user. Counters live in the default
cache's Redis when it has one, so every web process counts against the same budget; otherwise
(the embedded setup, a single web process) in the cache, as DRF keeps them. While Redis is
unreachable the counters follow AGENTRY_REDIS_FAILURE: uncounted requests (open) or a 503 (closed)."""

import hashlib
import hmac
import math
import os
import secrets

import redis
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _
from redis.commands.core import Script
from rest_framework.throttling import UserRateThrottle

from agents.models import Agent
from conversations.end_users import day_bounds, end_user_tokens_since
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


class HookThrottle(_CacheOutageThrottle):
    """Requests per hook, whoever sends them: each starts a run, which costs model calls."""

    scope = "hook"

    def get_rate(self):
        return settings.AGENTRY_HOOK_RATE or None

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": view.kwargs["hook_id"]}


class WidgetThrottle(_CacheOutageThrottle):
    """Requests per chat widget, from all its end users together (each may start a run): a leaked
    page cannot spend more than this of the agent's model calls, whatever tokens it holds."""

    scope = "widget"

    def get_rate(self):
        return settings.AGENTRY_WIDGET_RATE or None

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": view.kwargs["widget_id"]}


class EndUserMessageThrottle(_CacheOutageThrottle):
    """An agent's messages per minute from one end user of one application
    (Agent.end_user_messages_per_minute), in a sliding window like the rates above. The window's
    key holds a keyed digest of the end user, never their id: it outlives a forgotten end user
    by up to a minute and must not name them."""

    scope = "end_user_messages"

    def __init__(self, *, agent_id: int, owner_id: int | None, end_user: str, per_minute: int):
        self.per_minute = per_minute
        subject = f"{agent_id}:{owner_id}:{end_user}".encode()
        self.subject = hmac.new(settings.SECRET_KEY.encode(), subject, hashlib.sha256).hexdigest()[:32]
        super().__init__()

    def get_rate(self):
        return f"{self.per_minute}/min"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.subject}


class EndUserLimited(Exception):
    """A message refused by one of the agent's limits per end user; `retry_after` in seconds."""

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.message, self.retry_after = message, retry_after


# What a message to an agent with limits per end user reads of it.
END_USER_LIMIT_FIELDS = ("id", "end_user_messages_per_minute", "end_user_tokens_per_day", "time_zone")


def end_user_limits_check(request, *, agent: Agent, owner_id: int | None, end_user: str, now=None) -> None:
    """Raises EndUserLimited when a message of `end_user` to `agent` is over one of the agent's
    limits per end user. Tokens today first, read from the ledger (end_user_tokens_since: exact,
    and a message it refuses is not counted in the minute's window), then messages this minute,
    counted in Redis like the other rates. No limit set, or no end user: nothing is read."""
    if not end_user:
        return
    daily = agent.end_user_tokens_per_day
    if daily is not None:
        now = now or timezone.now()
        start, end = day_bounds(now, agent.time_zone)
        used = end_user_tokens_since(agent_id=agent.pk, owner_id=owner_id, end_user=end_user, since=start)
        if used >= daily:
            raise EndUserLimited(
                _(
                    "This end user has used %(used)s tokens of this agent today, which reaches its limit of "
                    "%(limit)s per end user a day; the limit resets at midnight (%(time_zone)s)."
                )
                % {"used": used, "limit": daily, "time_zone": agent.time_zone},
                retry_after=max(1, math.ceil((end - now).total_seconds())),
            )
    per_minute = agent.end_user_messages_per_minute
    if per_minute is not None:
        window = EndUserMessageThrottle(agent_id=agent.pk, owner_id=owner_id, end_user=end_user, per_minute=per_minute)
        if not window.allow_request(request, None):
            raise EndUserLimited(
                _("This end user has sent this agent %(limit)s messages in the last minute, its limit per end user.")
                % {"limit": per_minute},
                retry_after=max(1, math.ceil(window.wait() or 1)),
            )
