"""Database connections for processes that keep hundreds of runs waiting at once.

A worker thread waiting seconds on a model must not hold a PostgreSQL connection meanwhile:
with a connection pool configured (settings: DATABASES OPTIONS "pool"), closing hands the
connection back to the pool and the next query takes one again, cheaply.
"""

from django.db import connection


def release_connection() -> None:
    """Before waiting on the network: give this thread's connection back (never mid-transaction)."""
    if not connection.in_atomic_block:
        connection.close()
