"""What a Redis outage does to the counters kept in the cache (API rates, failed logins).

AGENTRY_REDIS_FAILURE=open lets requests through uncounted, so the API keeps working without
its rate limits; =closed refuses them, for deployments where an unlimited API or unlimited
password guessing is worse than an outage.
"""

import logging

from django.conf import settings

log = logging.getLogger(__name__)


def counters_fail_open(exc: Exception, *, counter: str) -> bool:
    """True when the request may go on without its `counter` (the policy is open)."""
    fail_open = settings.AGENTRY_REDIS_FAILURE == "open"
    log.warning(
        "%s unavailable (Redis: %s); %s",
        counter,
        exc,
        "letting requests through uncounted" if fail_open else "refusing requests",
    )
    return fail_open
