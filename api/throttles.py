"""Per-user request rates. Counters live in the default cache (Redis when configured), so
every web process counts against the same budget. While Redis is unreachable the counters
follow AGENTRY_REDIS_FAILURE: uncounted requests (open) or a 503 (closed)."""

import redis
from django.conf import settings
from rest_framework.throttling import UserRateThrottle

from platform_site.redis_failure import counters_fail_open


class _CacheOutageThrottle(UserRateThrottle):
    def allow_request(self, request, view):
        try:
            return super().allow_request(request, view)
        except redis.RedisError as exc:
            if counters_fail_open(exc, counter=f"API rate limit ({self.scope})"):
                return True
            raise  # the API exception handler answers 503


class ApiUserThrottle(_CacheOutageThrottle):
    scope = "user"

    def get_rate(self):
        return settings.AGENTRY_API_RATE or None


class RunStartThrottle(_CacheOutageThrottle):
    """Requests that start a run cost model calls: they get a budget of their own."""

    scope = "run_start"

    def get_rate(self):
        return settings.AGENTRY_API_RUN_RATE or None
