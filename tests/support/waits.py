"""Waiting on a condition (never a fixed sleep): polled every `interval`, failing after `timeout`."""

import time


def wait_for(predicate, *, timeout: float = 30, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)
