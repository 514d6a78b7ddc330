"""Retry policy shared by model calls and webhook deliveries: which HTTP answers are worth
asking again, how long the server asked us to wait, and how long to wait otherwise."""

import email.utils
import random
import time

# Timeouts (408), conflicts a repeat resolves (409: OpenAI's lock timeouts), too early (425),
# rate limits (429) and every server error: the same request may succeed later. Any other 4xx
# means the request itself is wrong, and repeating it only repeats the refusal.
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After is either delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def backoff_delay(attempt: int, *, base: float, cap: float, retry_after: float | None = None) -> float:
    """Exponential backoff with up to 25 % jitter, or the server's Retry-After; never above `cap`."""
    if retry_after is not None:
        return min(retry_after, cap)
    delay = min(base * (2 ** (attempt - 1)), cap)
    return delay + random.uniform(0, delay / 4)
