"""Retry delays shared by model calls and webhook deliveries."""

import random


def backoff_delay(attempt: int, *, base: float, cap: float, retry_after: float | None = None) -> float:
    """Exponential backoff with up to 25 % jitter, or the server's Retry-After; never above `cap`."""
    if retry_after is not None:
        return min(retry_after, cap)
    delay = min(base * (2 ** (attempt - 1)), cap)
    return delay + random.uniform(0, delay / 4)
