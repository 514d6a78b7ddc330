"""Calls made at the same moment, for the tests of what a lock or a conditional update promises."""

import threading

from django.db import connection


def concurrently(calls: list, *, timeout: float = 120) -> list:
    """Run the calls at the same moment, each on its own thread and database connection; returns
    each call's result, or the exception it raised (the outcome under test may be one)."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def target(index, call):
        try:
            barrier.wait()
            results[index] = call()
        except Exception as exc:  # the outcome under test may be an exception
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=target, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return results
