"""GET /api/v1/runs/{id}/events/ over a real uvicorn server and a real worker: the stream, resume
with Last-Event-ID, isolation, idle streams, and the embedded (no Redis) polling path."""

import json
import os
import threading
import time

import httpx
import pytest
from django.db import connection
from django.test import Client

from agents.services import agent_version_current
from conversations.batch import run_event_append
from conversations.models import Run, RunEvent
from conversations.services import conversation_create
from engine.runs import run_finish
from tests.conftest import _database_url
from tests.support.api_server import ApiServer
from tests.support.factories import ModelConfigFactory, make_agent, make_user, token_for
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def tool_script(held=None) -> dict:
    """A tool call, then a streamed answer; with `held`, the answer waits for the test's release."""
    answer = {
        "content": "You said {last_tool_result}, and that is all I know about it.",
        "usage": {"prompt_tokens": 70, "completion_tokens": 12},
        **({"hold": held.label} if held else {}),
    }
    call = {
        "tool_calls": [{"name": "test-echo", "arguments": {"text": "{word}"}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 7},
    }
    return {
        "defaults": {"stream_chunk_delay_ms": 5},
        "scenarios": [{"match": "echo (?P<word>\\w+)", "steps": [call, answer]}],
    }


def iter_events(response: httpx.Response, on_comment=None):
    """Parse SSE from a streaming response: dicts with id, event and parsed data; comment lines
    (keepalives) go to `on_comment` when given."""
    current = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in current:
                yield {"id": int(current["id"]), "event": current["event"], "data": json.loads(current["data"])}
            current = {}
        elif line.startswith(":"):
            if on_comment is not None:
                on_comment(line)
        else:
            field, _, value = line.partition(":")
            current[field] = value.removeprefix(" ")


def read_events(response: httpx.Response) -> list[dict]:
    return list(iter_events(response))


@pytest.fixture
def user():
    return make_user()


@pytest.fixture
def headers(user):
    return {"Authorization": f"Bearer {token_for(user)}"}


@pytest.fixture
def tool_agent(fake_llm):
    fake_llm.script("sse-tool", tool_script())
    return make_agent(
        tools=["test-echo"],
        slug="sse-agent",
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="sse-tool", stream=True),
    )


def _start_run(server, headers, content: str) -> str:
    conversation = httpx.post(f"{server.base_url}/api/v1/conversations/", json={"agent": "sse-agent"}, headers=headers)
    assert conversation.status_code == 201, conversation.text
    response = httpx.post(
        f"{server.base_url}/api/v1/conversations/{conversation.json()['id']}/messages/",
        json={"content": content},
        headers=headers,
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _stream(server, run_id, headers, **kwargs):
    return httpx.stream(
        "GET", f"{server.base_url}/api/v1/runs/{run_id}/events/", headers=headers, timeout=httpx.Timeout(30), **kwargs
    )


def test_a_run_streams_every_event_in_order_and_the_stream_ends(api_server, worker, tool_agent, headers):
    run_id = _start_run(api_server, headers, "echo parrot")
    with _stream(api_server, run_id, headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = read_events(response)

    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    types = [e["event"] for e in events]
    assert types[0] == "run.queued" and types[-1] == "run.completed"
    for expected in (
        "run.running",
        "llm_call.started",
        "llm_call.completed",
        "tool.started",
        "tool.completed",
        "message.delta",
    ):
        assert expected in types
    completed = [e["data"] for e in events if e["event"] == "llm_call.completed"]
    assert [c["payload"]["usage"]["prompt_tokens"] for c in completed] == [50, 70]
    streamed = "".join(e["data"]["payload"]["text"] for e in events if e["event"] == "message.delta")
    assert streamed == "You said parrot, and that is all I know about it."
    assert all(e["data"]["run"] == run_id and e["data"]["seq"] == e["id"] for e in events)
    assert len(events) == RunEvent.objects.filter(run_id=run_id).count()


def test_last_event_id_resumes_without_loss_or_duplicates(api_server, worker, tool_agent, headers, fake_llm):
    with fake_llm.held() as held:
        # The answer after the tool waits until the client has come back: the run is still
        # answering when the client disconnects, and it goes on while the client follows it again.
        fake_llm.script("sse-tool", tool_script(held))
        run_id = _start_run(api_server, headers, "echo resume")
        with _stream(api_server, run_id, headers) as response:
            first = []
            for event in iter_events(response):
                first.append(event)
                if event["event"] == "tool.completed":
                    break  # disconnect while the run is still answering
        assert Run.objects.get(pk=run_id).status == "running"

        with _stream(api_server, run_id, {**headers, "Last-Event-ID": str(first[-1]["id"])}) as response:
            held.release()
            rest = read_events(response)
    ids = [e["id"] for e in first + rest]
    assert ids == list(RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))
    assert rest[-1]["event"] == "run.completed"

    # The query parameter does the same for clients that cannot set the header.
    with _stream(api_server, run_id, headers, params={"last_event_id": ids[-3]}) as response:
        assert [e["id"] for e in read_events(response)] == ids[-2:]
    # Asked again after the end: 204, which tells an EventSource to stop reconnecting.
    finished = httpx.get(
        f"{api_server.base_url}/api/v1/runs/{run_id}/events/", headers={**headers, "Last-Event-ID": str(ids[-1])}
    )
    assert finished.status_code == 204


def _parked_run(agent, owner) -> Run:
    """A run waiting for a person: no worker will touch it."""
    conversation = conversation_create(agent=agent, owner=owner)
    run = Run.objects.create(
        conversation=conversation,
        agent=agent,
        agent_version=agent_version_current(agent=agent),
        status="awaiting_approval",
    )
    run_event_append(run_id=run.pk, type="run.awaiting_approval")
    return run


def test_streams_are_private_and_reject_bad_input(api_server, user, headers):
    run = _parked_run(make_agent(), user)
    url = f"{api_server.base_url}/api/v1/runs/{run.pk}/events/"
    other = httpx.get(url, headers={"Authorization": f"Bearer {token_for(make_user())}"})
    assert other.status_code == 404 and other.json() == {"message": "Not found.", "extra": {}}
    assert httpx.get(url).status_code == 401
    bad = httpx.get(url, headers={**headers, "Last-Event-ID": "-1"})
    assert bad.status_code == 400 and bad.json()["extra"] == {"fields": {"Last-Event-ID": [bad.json()["message"]]}}
    # Digits that str.isdigit() accepts and int() does not, and more digits than int() converts.
    for malformed in ("²", "9" * 5000):
        assert httpx.get(url, headers=headers, params={"last_event_id": malformed}).status_code == 400
    unrouted = httpx.get(f"{api_server.base_url}/api/v1/runs/not-a-run-id/events/", headers=headers)
    assert unrouted.status_code == 404 and unrouted.json() == {"message": "Not found.", "extra": {}}

    # Pages use the session cookie of a logged-in user instead of a token.
    browser = Client()
    browser.force_login(user)
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    run_finish(run_id=run.pk, status="cancelled", stop_reason="cancelled")
    with httpx.stream("GET", url, cookies=cookies, timeout=10) as response:
        assert [e["event"] for e in read_events(response)] == ["run.awaiting_approval", "run.cancelled"]


def _server_db_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agentry-test-web'")
        return cursor.fetchone()[0]


def test_idle_streams_hold_no_thread_and_no_database_connection(api_server, user, headers):
    agent = make_agent()
    runs = [_parked_run(agent, user) for _ in range(30)]
    httpx.get(f"{api_server.base_url}/api/v1/agents/", headers=headers)  # warm the server up
    threads_before, connections_before = api_server.threads(), _server_db_connections()

    received: dict = {run.pk: [] for run in runs}
    cancelling = threading.Event()
    # Streams that learnt of the cancel from their timed keepalive poll instead of a wake-up.
    polled = []

    def follow(run):
        def note(comment):
            if cancelling.is_set():
                polled.append(run.pk)

        with _stream(api_server, run.pk, headers) as response:
            for event in iter_events(response, on_comment=note):
                received[run.pk].append(event)

    followers = [threading.Thread(target=follow, args=(run,)) for run in runs]
    for follower in followers:
        follower.start()
    wait_for(lambda: all(received.values()), message="30 streams to deliver their first event")
    time.sleep(0.5)  # every stream is now waiting for the next event
    threads_idle, connections_idle = api_server.threads(), _server_db_connections()

    started = time.monotonic()
    cancelling.set()
    for run in runs:
        run_finish(run_id=run.pk, status="cancelled", stop_reason="cancelled")
    for follower in followers:
        follower.join(timeout=30)
    woke_after = time.monotonic() - started

    print(
        f"\n30 idle streams: server threads {threads_before} -> {threads_idle}, server DB connections "
        f"{connections_before} -> {connections_idle}, all ended {woke_after:.2f} s after their runs"
    )
    # At most the default thread pool's few threads (and their connections) may come and stay.
    assert threads_idle - threads_before <= 8, "threads grew with the number of open streams"
    assert connections_idle - connections_before <= 8, "database connections grew with the number of open streams"
    assert all([e["event"] for e in received[run.pk]] == ["run.awaiting_approval", "run.cancelled"] for run in runs)
    # Redis wakes the streams; without it each would end only after its keepalive poll, which
    # sends a keepalive comment first.
    assert not any(follower.is_alive() for follower in followers)
    assert polled == []


@pytest.fixture(scope="module")
def server_without_redis(django_db_setup, django_db_blocker):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    server = ApiServer(
        database_url=_database_url(),
        name="web-without-redis",
        env={
            "REDIS_URL": "",
            "AGENTRY_SSE_POLL_SECONDS": "0.2",
            "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", ""),
        },
    ).start()
    yield server
    server.stop()


def test_without_redis_streams_poll_the_rows(server_without_redis, transactional_db, worker, tool_agent, headers):
    run_id = _start_run(server_without_redis, headers, "echo embedded")
    with _stream(server_without_redis, run_id, headers) as response:
        events = read_events(response)
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == "run.completed"
    assert len(events) == RunEvent.objects.filter(run_id=run_id).count()
