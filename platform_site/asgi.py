import os
import re
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import SyncToAsync, ThreadSensitiveContext
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
django_application = get_asgi_application()

# Django gives each request its own thread for the request's synchronous parts (signals,
# middleware hooks, session lookups), kept until the response is finished: for an event stream
# open for minutes, an idle thread per stream. Long-lived endpoints share one such thread
# instead; their synchronous parts are a few short calls, and their queries run on the
# default pool (platform_site.asyncdb).
LONG_LIVED_PATHS = re.compile(r"^/api/v1/runs/[^/]+/events/$|^/v1/chat/completions$")
_long_lived_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="long-lived-requests")


async def application(scope, receive, send):
    # uvicorn starts the next request of a kept-alive connection from inside the task of the one
    # before, so it inherits that request's thread-sensitive context; after a long-lived request
    # that context has exited and every sync call of the next request would fail (a 500).
    SyncToAsync.thread_sensitive_context.set(None)
    if scope["type"] == "http" and LONG_LIVED_PATHS.match(scope["path"]):
        async with ThreadSensitiveContext(executor=_long_lived_executor):
            return await django_application(scope, receive, send)
    return await django_application(scope, receive, send)
