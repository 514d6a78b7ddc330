"""GET /health/: each dependency's state, for load balancers and on-call engineers.

503 when the web tier cannot serve: the database is down, or Redis is while the counters fail
closed (AGENTRY_REDIS_FAILURE=closed). A broker outage only delays runs (they stay queued and
the sweeper sends them once it is back) and an open-failing Redis only costs rate limits and
instant wake-ups, so those answer 200 with status "degraded": taking every web process out of
a load balancer for them would turn a delay into an outage.
"""

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache

from platform_site.celery import app

TIMEOUT_SECONDS = 2


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _broker() -> None:
    with app.connection_for_write(connect_timeout=TIMEOUT_SECONDS) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=TIMEOUT_SECONDS)


def _redis() -> None:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS
    )
    try:
        client.ping()
    finally:
        client.close()


def _probe(check) -> dict:
    try:
        check()
    except Exception as exc:  # whatever the client raised, the answer is "down", never a 500
        # The exception's class only: its text may name internal hosts.
        return {"ok": False, "error": type(exc).__name__}
    return {"ok": True}


@never_cache
def health(request):
    checks = {"database": {**_probe(_database), "required": True}, "broker": {**_probe(_broker), "required": False}}
    if settings.REDIS_URL:
        checks["redis"] = {**_probe(_redis), "required": settings.AGENTRY_REDIS_FAILURE == "closed"}
    if any(c["required"] and not c["ok"] for c in checks.values()):
        state, status = "unavailable", 503
    elif all(c["ok"] for c in checks.values()):
        state, status = "ok", 200
    else:
        state, status = "degraded", 200
    return JsonResponse({"status": state, "checks": checks}, status=status)
