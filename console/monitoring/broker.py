"""What the broker and the workers say: messages waiting per Celery queue, workers answering
a ping. Both answers are cached for a few seconds, so a dashboard refreshing in many tabs
asks the broker once per interval; a stale answer is served while a background thread asks
again, so only the first page after a quiet spell waits, and at most about the ping's timeout."""

import logging
import threading
import time

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from platform_site.celery import app

log = logging.getLogger(__name__)

QUEUES_KEY = "agentry:monitor:queues"
WORKERS_KEY = "agentry:monitor:workers"

_refreshing: set[str] = set()
_refreshing_lock = threading.Lock()


def _depth(connection, name: str) -> int | None:
    """Messages waiting in one queue, as the transport counts them (LLEN of the queue's keys on
    Redis, message files on the filesystem broker, the declare-ok count on AMQP); None when
    the transport cannot tell."""
    channel = connection.channel()
    try:
        return channel.queue_declare(queue=name, passive=True).message_count
    except connection.channel_errors:
        # Redis has no key for an empty queue and AMQP has no queue nobody declared: both empty.
        return 0
    except Exception as exc:
        log.info("queue %s: depth unknown on this transport: %s", name, exc)
        return None
    finally:
        try:
            channel.close()
        except Exception:  # a channel the broker already closed (AMQP after a 404)
            pass


def _queue_names() -> list[str]:
    return [queue.name for queue in app.conf.task_queues or []] or [app.conf.task_default_queue]


def _probe_queues() -> dict:
    names = _queue_names()
    transport = (app.conf.broker_read_url or app.conf.broker_url or "").split("://")[0]
    try:
        with app.connection_for_read(connect_timeout=settings.AGENTRY_MONITOR_BROKER_TIMEOUT) as connection:
            connection.ensure_connection(
                max_retries=1, interval_start=0, timeout=settings.AGENTRY_MONITOR_BROKER_TIMEOUT
            )
            queues = [{"name": name, "depth": _depth(connection, name)} for name in names]
        error = ""
    except Exception as exc:  # any broker failure is shown on the page, never raised to it
        log.warning("queue depth probe failed: %s", exc)
        queues, error = [{"name": name, "depth": None} for name in names], str(exc)[:200]
    return {"transport": transport, "queues": queues, "error": error, "checked_at": timezone.now().isoformat()}


def _probe_workers() -> dict:
    try:
        replies = app.control.ping(timeout=settings.AGENTRY_MONITOR_PING_TIMEOUT) or []
        online, error = sorted(name for reply in replies for name in reply), ""
    except Exception as exc:
        log.warning("worker ping failed: %s", exc)
        online, error = [], str(exc)[:200]
    return {"online": online, "error": error, "checked_at": timezone.now().isoformat()}


def queue_depths() -> dict:
    pending = {
        "transport": "",
        "queues": [{"name": name, "depth": None} for name in _queue_names()],
        "error": "",
        "pending": True,
    }
    return _cached(QUEUES_KEY, _probe_queues, pending)


def workers_online() -> dict:
    return _cached(WORKERS_KEY, _probe_workers, {"online": [], "error": "", "pending": True})


def _store(key: str, value: dict) -> dict:
    # Kept well past its freshness so a stale answer can be served while a new one is fetched.
    cache.set(key, {"value": value, "at": time.time()}, settings.AGENTRY_MONITOR_PROBE_CACHE_SECONDS * 6)
    return value


def _refresh_in_background(key: str, probe) -> threading.Thread | None:
    with _refreshing_lock:
        if key in _refreshing:
            return None
        _refreshing.add(key)

    def refresh():
        try:
            _store(key, probe())
        finally:
            with _refreshing_lock:
                _refreshing.discard(key)

    thread = threading.Thread(target=refresh, name=f"probe:{key}", daemon=True)
    thread.start()
    return thread


def _cached(key: str, probe, pending: dict) -> dict:
    """Fresh: the cached answer. Stale: the cached answer too, while one thread asks again.
    None yet: ask, but wait only a little longer than the ping's timeout (a slow broker's
    answer then lands in the cache for the next refresh, and this page says 'checking')."""
    entry = cache.get(key)
    if entry is not None:
        if time.time() - entry["at"] > settings.AGENTRY_MONITOR_PROBE_CACHE_SECONDS:
            _refresh_in_background(key, probe)
        return entry["value"]
    thread = _refresh_in_background(key, probe)
    if thread is not None:
        thread.join(settings.AGENTRY_MONITOR_PING_TIMEOUT + 0.3)
    entry = cache.get(key)
    return entry["value"] if entry is not None else pending
