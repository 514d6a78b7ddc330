"""Database work from async views.

Queries run on the event loop's default thread pool, never on a thread of their own, and each
call is treated like a request: a connection that is broken or older than CONN_MAX_AGE is
closed before and after it (with CONN_MAX_AGE=0 every call closes its connection). A waiting
stream therefore holds no connection; the pool's few threads keep at most one each.
"""

from asgiref.sync import sync_to_async
from django.db import close_old_connections


def _call(fn, args, kwargs):
    close_old_connections()
    try:
        return fn(*args, **kwargs)
    finally:
        close_old_connections()


async def db(fn, /, *args, **kwargs):
    return await sync_to_async(_call, thread_sensitive=False)(fn, args, kwargs)
