"""Dependency outages degrade cleanly: a JSON 503 when PostgreSQL is unreachable, a working API
while Redis is down (counters fail open, or closed when configured), a 202 for a committed run
while the broker is down, and /health/ telling which dependency is missing.

Outages are real: the web runs under uvicorn in a subprocess pointed at a port nothing listens
on, or at a throwaway redis-server that the test kills. The shared PostgreSQL and Redis are
never touched.
"""

import socket
import subprocess
import uuid

import httpx
import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.core.cache import caches
from django.db import OperationalError
from django.test import Client
from kombu.exceptions import OperationalError as BrokerError

from conversations.models import Run
from conversations.services import conversation_create
from engine import tasks
from engine.admission import message_post
from engine.runs import run_finish
from tests.conftest import _database_url
from tests.support.api import client_for
from tests.support.api_server import ApiServer
from tests.support.factories import make_agent, make_user, token_for
from tests.support.waits import wait_for

# A client that gives up long before the old 60 s pool wait: a hang fails the test.
CLIENT_TIMEOUT = 30


def _closed_port() -> int:
    """A port that was free a moment ago and that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThrowawayRedis:
    def __init__(self):
        self.port = _closed_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self._answers, timeout=10, message="throwaway redis-server answering")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def throwaway_redis():
    redis_server = ThrowawayRedis()
    yield redis_server
    redis_server.kill()


@pytest.fixture
def servers():
    started = []

    def start(*, ready_statuses=(200,), **kwargs) -> ApiServer:
        server = ApiServer(**kwargs)
        started.append(server)
        return server.start(ready_statuses=ready_statuses)

    yield start
    for server in started:
        server.stop()


def _unavailable(response: httpx.Response, dependency: str) -> dict:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["retry-after"]
    return response.json()


@pytest.mark.e2e
def test_unreachable_database_is_a_json_503_for_the_api_and_health(servers):
    server = servers(
        database_url=f"postgres://postgres@127.0.0.1:{_closed_port()}/agentry",
        name="web-database-down",
        ready_statuses=(503,),
        # Each request waits this long for a pool connection that never comes (5 s by default):
        # the answers are the same after 1 s.
        env={"AGENTRY_DB_POOL_TIMEOUT": "1"},
    )
    headers = {"Authorization": "Bearer some-token"}

    body = _unavailable(
        httpx.get(f"{server.base_url}/api/v1/conversations/", headers=headers, timeout=CLIENT_TIMEOUT), "database"
    )
    assert body["extra"] == {"unavailable": "database"} and "unavailable" in body["message"]

    # Outside DRF too: the OpenAI-compatible endpoint answers in OpenAI's error shape.
    completion = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        headers=headers,
        timeout=CLIENT_TIMEOUT,
        json={"model": "any", "messages": [{"role": "user", "content": "hi"}]},
    )
    error = _unavailable(completion, "database")["error"]
    assert error["type"] == "server_error" and error["code"] == "service_unavailable"

    health = httpx.get(f"{server.base_url}/health/", timeout=CLIENT_TIMEOUT)
    assert health.status_code == 503
    assert health.json()["status"] == "unavailable"
    assert health.json()["checks"]["database"] == {"ok": False, "error": "OperationalError", "required": True}
    assert health.json()["checks"]["broker"]["ok"] is True


@pytest.mark.e2e
@pytest.mark.parametrize("policy", ["open", "closed"])
def test_redis_outage_follows_the_failure_policy(servers, throwaway_redis, transactional_db, policy):
    user = make_user()
    headers = {"Authorization": f"Bearer {token_for(user)}"}
    conversation = conversation_create(agent=make_agent(), owner=user)
    server = servers(
        database_url=_database_url(),
        name=f"web-redis-{policy}",
        env={"REDIS_URL": throwaway_redis.url, "AGENTRY_REDIS_FAILURE": policy},
    )
    conversations_url = f"{server.base_url}/api/v1/conversations/"
    assert httpx.get(conversations_url, headers=headers, timeout=CLIENT_TIMEOUT).status_code == 200

    throwaway_redis.kill()

    listed = httpx.get(conversations_url, headers=headers, timeout=CLIENT_TIMEOUT)
    posted = httpx.post(
        f"{conversations_url}{conversation.pk}/messages/",
        headers=headers,
        timeout=CLIENT_TIMEOUT,
        json={"content": "hello while Redis is down"},
    )
    health = httpx.get(f"{server.base_url}/health/", timeout=CLIENT_TIMEOUT)
    assert health.json()["checks"]["redis"] == {"ok": False, "error": "ConnectionError", "required": policy == "closed"}
    if policy == "open":
        assert listed.status_code == 200 and [c["id"] for c in listed.json()["results"]] == [str(conversation.pk)]
        assert posted.status_code == 202, posted.text
        # Admitted and kept (a live worker of the suite may already have taken it).
        assert Run.objects.filter(pk=posted.json()["id"], conversation=conversation).exists()
        assert health.status_code == 200 and health.json()["status"] == "degraded"
    else:
        assert _unavailable(listed, "redis")["extra"] == {"unavailable": "redis"}
        assert _unavailable(posted, "redis")["extra"] == {"unavailable": "redis"}
        assert not Run.objects.filter(conversation=conversation).exists()
        assert health.status_code == 503 and health.json()["status"] == "unavailable"


@pytest.mark.e2e
def test_event_streams_still_deliver_while_redis_is_down(servers, throwaway_redis, transactional_db, no_enqueue):
    """Wake-ups come from Redis pub/sub; without it a stream polls the database instead."""
    user = make_user()
    run = message_post(conversation=conversation_create(agent=make_agent(), owner=user), content="hi")
    server = servers(database_url=_database_url(), name="web-redis-streams", env={"REDIS_URL": throwaway_redis.url})
    throwaway_redis.kill()
    run_finish(run_id=run.pk, status="cancelled", stop_reason="cancelled")

    with httpx.stream(
        "GET",
        f"{server.base_url}/api/v1/runs/{run.pk}/events/",
        timeout=CLIENT_TIMEOUT,
        headers={"Authorization": f"Bearer {token_for(user)}"},
    ) as response:
        assert response.status_code == 200
        events = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    assert events == ["run.queued", "run.cancelled"]


@pytest.mark.e2e
def test_broker_outage_keeps_the_202_and_the_retry_returns_the_same_run(servers, transactional_db):
    user = make_user()
    headers = {"Authorization": f"Bearer {token_for(user)}", "Idempotency-Key": f"k-{uuid.uuid4().hex}"}
    conversation = conversation_create(agent=make_agent(), owner=user)
    server = servers(
        database_url=_database_url(),
        name="web-broker-down",
        env={"CELERY_BROKER_URL": f"redis://127.0.0.1:{_closed_port()}/0"},
    )
    url = f"{server.base_url}/api/v1/conversations/{conversation.pk}/messages/"

    first = httpx.post(url, headers=headers, json={"content": "pay invoice 9"}, timeout=CLIENT_TIMEOUT)
    assert first.status_code == 202, first.text
    run = Run.objects.get(pk=first.json()["id"])
    # Queued and stamped as sent: the sweeper hands it to a worker once the broker is back.
    assert run.status == "queued" and run.enqueued_at is not None

    again = httpx.post(url, headers=headers, json={"content": "pay invoice 9"}, timeout=CLIENT_TIMEOUT)
    assert again.status_code == 202 and again.json()["id"] == str(run.pk)

    health = httpx.get(f"{server.base_url}/health/", timeout=CLIENT_TIMEOUT)
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    assert health.json()["checks"]["broker"]["ok"] is False
    assert health.json()["checks"]["database"]["ok"] is True


def test_a_broker_error_after_commit_is_logged_and_the_run_stays_queued(
    db, django_capture_on_commit_callbacks, monkeypatch, caplog
):
    def broker_down(*args, **kwargs):
        raise BrokerError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    monkeypatch.setattr(tasks.run_advance_task, "delay", broker_down)
    conversation = conversation_create(agent=make_agent())
    with django_capture_on_commit_callbacks(execute=True):
        run = message_post(conversation=conversation, content="hello")
    assert Run.objects.get(pk=run.pk).status == "queued"
    assert f"run {run.pk} committed but not sent to the broker" in caplog.text


@pytest.fixture
def dead_redis_cache(settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{_closed_port()}/0",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    yield caches["default"]


@pytest.mark.parametrize("policy, expected", [("open", 200), ("closed", 503)])
def test_api_throttle_follows_the_policy_in_process(db, dead_redis_cache, settings, policy, expected):
    settings.AGENTRY_REDIS_FAILURE = policy
    response = client_for(make_user()).get("/api/v1/conversations/")
    assert response.status_code == expected, response.content
    if expected == 503:
        assert response.json()["extra"] == {"unavailable": "redis"}


def test_health_reports_every_dependency_when_all_are_up(db, client):
    response = client.get("/health/")
    assert response.status_code == 200 and response.json()["status"] == "ok"
    checks = response.json()["checks"]
    assert {name: check["ok"] for name, check in checks.items()} == {"database": True, "broker": True, "redis": True}


def test_an_outage_met_while_the_session_is_saved_is_a_503_not_an_html_500(admin_user, monkeypatch, settings):
    """The session is written after the view returns (here on every request), outside the
    middleware that turns outages into 503s; the database going away at that moment is the same
    503 (the 500 handler knows it). The outage is raised by the session store: the window between
    the view and its save is too narrow to hit with a real server stopping."""
    settings.SESSION_SAVE_EVERY_REQUEST = True
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    assert client.get("/admin/").status_code == 200

    def refused(self, must_create=False):
        raise OperationalError("connection to server at 127.0.0.1 failed: Connection refused")

    monkeypatch.setattr(SessionStore, "save", refused)
    response = client.get("/admin/")
    assert response.status_code == 503
    assert response["Retry-After"]
    assert response.json()["extra"] == {"unavailable": "database"}
