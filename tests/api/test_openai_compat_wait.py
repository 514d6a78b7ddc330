"""How a plain (unstreamed) chat completion waits for its run, served in-process by the ASGI
handler: it answers once the run has settled, and with a 504 naming the run when the configured
wait runs out first. The run is kept off the broker (a worker left running by an end-to-end test
would take it), so it stays queued until the test moves it.

The view reads on threads of its own, with their own connections: rows must be committed,
hence transactional_db."""

import threading
import time
from unittest import mock

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient

from conversations.models import Run
from engine.transitions import run_transition
from tests.support.factories import make_agent, make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/chat/completions"


@pytest.fixture
def unqueued_agent():
    with mock.patch("engine.tasks.run_advance_task.delay"):
        yield make_agent(slug="waits")


def _post(user, content: str = "hello"):
    body = {"model": "waits", "messages": [{"role": "user", "content": content}]}
    headers = {"Authorization": f"Bearer {token_for(user)}"}
    return async_to_sync(AsyncClient().post)(URL, body, content_type="application/json", headers=headers)


def test_a_run_still_queued_when_the_wait_runs_out_is_a_504_naming_it(unqueued_agent, settings):
    settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS = 0.5
    response = _post(make_user())
    assert response.status_code == 504, response.content
    run = Run.objects.get()
    assert response.headers["X-Agentry-Run-Id"] == str(run.pk)
    error = response.json()["error"]
    assert error["code"] == "timeout" and f"still {run.status}" in error["message"] and str(run.pk) in error["message"]


def test_the_answer_comes_when_the_run_settles_not_when_the_wait_runs_out(unqueued_agent, settings):
    """The test fails the run while the request waits: the request answers with that outcome
    (a 502) on the run's wake-up. Its wait and its timed poll are two minutes, so an answer within
    one minute came from the wake-up (a behaviour with a wide margin, not a speed figure)."""
    settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS = 120
    settings.AGENTRY_SSE_KEEPALIVE_SECONDS = settings.AGENTRY_SSE_POLL_SECONDS = 120

    def fail_it():
        try:
            while not (run := Run.objects.first()):
                threading.Event().wait(0.02)
            threading.Event().wait(0.3)  # the request is waiting by now
            fields = {"stop_reason": "provider_error", "error": "the model is down"}
            assert run_transition(run_id=run.pk, to="failed", expect=["queued"], fields=fields)
        finally:
            connection.close()  # this thread's own

    mover = threading.Thread(target=fail_it)
    mover.start()
    started = time.monotonic()
    response = _post(make_user())
    waited = time.monotonic() - started
    mover.join()
    assert response.status_code == 502, response.content
    assert "the model is down" in response.json()["error"]["message"]
    assert waited < 60
