"""Per-user request rates. Counters live in the default cache (Redis when configured), so
every web process counts against the same budget."""

from django.conf import settings
from rest_framework.throttling import UserRateThrottle


class ApiUserThrottle(UserRateThrottle):
    scope = "user"

    def get_rate(self):
        return settings.AGENTRY_API_RATE or None


class RunStartThrottle(UserRateThrottle):
    """Requests that start a run cost model calls: they get a budget of their own."""

    scope = "run_start"

    def get_rate(self):
        return settings.AGENTRY_API_RUN_RATE or None
