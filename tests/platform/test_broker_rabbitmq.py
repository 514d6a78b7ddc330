"""RabbitMQ as the Celery broker, end to end: the web publishes a run's task to RabbitMQ and a
worker consuming from it advances the run; a worker killed in the middle of a model call gives its
unacknowledged message back at once, so a new worker resumes the run without the sweeper; and the
compose file's worker health check answers through RabbitMQ.

The web and the workers run as processes with CELERY_BROKER_URL pointing at RabbitMQ
(TEST_RABBITMQ_URL, default the local server with guest/guest); this process only writes rows
and reads them, so nothing here goes through the suite's Redis broker."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from django.db import connection
from django.utils import timezone
from kombu import Connection

from conversations.models import LLMCall, Message, Run, RunEvent
from tests.conftest import _database_url
from tests.support.api_server import ApiServer
from tests.support.factories import make_user, token_for
from tests.support.llm import agent_on, assert_totals_match_calls
from tests.support.waits import wait_for
from tests.support.workers import WorkerProcess

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent.parent
RABBITMQ_URL = os.environ.get("TEST_RABBITMQ_URL") or "amqp://guest:guest@127.0.0.1:5672//"

ECHO_SCRIPT = {
    "scenarios": [
        {
            "match": "echo (?P<word>\\w+)",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "{word}"}}]},
                {"content": "You said {last_tool_result}."},
            ],
        }
    ]
}
# The first request is held 8 s (it outlasts the kill); the same request made again by the new
# worker is answered at once.
SLOW_ONCE_SCRIPT = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {
                    "content": "answered after the restart",
                    "fault": {"kind": "timeout", "timeout_ms": 8000, "times": 1},
                }
            ],
        }
    ]
}


def _listening(url: str) -> bool:
    broker = Connection(url)
    try:
        with socket.create_connection((broker.hostname, broker.port or 5672), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def rabbitmq_env() -> dict:
    if not _listening(RABBITMQ_URL):
        pytest.skip(f"RabbitMQ is not listening at {Connection(RABBITMQ_URL).as_uri()} (set TEST_RABBITMQ_URL)")
    return {"CELERY_BROKER_URL": RABBITMQ_URL}


@pytest.fixture(scope="module")
def rabbitmq_web(django_db_setup, django_db_blocker, rabbitmq_env):
    if connection.vendor != "postgresql":
        pytest.skip("end-to-end tests need PostgreSQL (the test settings default to it)")
    server = ApiServer(database_url=_database_url(), env=rabbitmq_env, name="web-rabbitmq").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def rabbitmq_worker_process(django_db_setup, django_db_blocker, rabbitmq_env):
    if connection.vendor != "postgresql":
        pytest.skip("end-to-end tests need PostgreSQL (the test settings default to it)")
    process = WorkerProcess(database_url=_database_url(), env=rabbitmq_env, name="worker-rabbitmq")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def rabbitmq_worker(rabbitmq_worker_process, transactional_db):
    """A live worker on RabbitMQ; restarted if a previous test killed it."""
    if not rabbitmq_worker_process.alive:
        rabbitmq_worker_process.start()
    return rabbitmq_worker_process


def _post_message(web: ApiServer, agent_slug: str, content: str) -> str:
    headers = {"Authorization": f"Bearer {token_for(make_user())}"}
    conversation = httpx.post(
        f"{web.base_url}/api/v1/conversations/", json={"agent": agent_slug}, headers=headers, timeout=30
    )
    assert conversation.status_code == 201, conversation.text
    response = httpx.post(
        f"{web.base_url}/api/v1/conversations/{conversation.json()['id']}/messages/",
        json={"content": content},
        headers=headers,
        timeout=30,
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _claimed_by(run: Run) -> list[int]:
    """The worker process ids that claimed the run, in order (from its run.running events)."""
    owners = RunEvent.objects.filter(run=run, type="run.running").order_by("seq").values_list("payload", flat=True)
    return [int(owner["worker"].split(":")[1]) for owner in owners]


def test_a_message_posted_to_the_web_runs_on_a_worker_consuming_from_rabbitmq(rabbitmq_web, rabbitmq_worker, fake_llm):
    agent = agent_on(fake_llm, ECHO_SCRIPT, tools=["test-echo"], slug="rabbit-echo")
    run_id = _post_message(rabbitmq_web, agent.slug, "echo rabbit")

    run = wait_for(lambda: Run.objects.filter(pk=run_id, status="completed").first(), timeout=60, message="the run")
    assert run.stop_reason == "final_answer"
    answer = Message.objects.filter(run=run, role="assistant").order_by("-order").first()
    assert answer.content == "You said rabbit."
    assert_totals_match_calls(run)
    # The worker on RabbitMQ took it, not a worker on the suite's Redis broker.
    assert _claimed_by(run) == [rabbitmq_worker.process.pid]
    log = (ROOT / "test-artifacts" / f"worker-rabbitmq-{rabbitmq_worker.starts}.log").read_text()
    assert "transport:   amqp://guest:**@" in log


def test_a_killed_workers_message_comes_back_at_once_and_a_new_worker_resumes_the_run(
    rabbitmq_web, rabbitmq_worker, fake_llm
):
    agent = agent_on(fake_llm, SLOW_ONCE_SCRIPT, tools=[], slug="rabbit-slow")
    run_id = _post_message(rabbitmq_web, agent.slug, "take your time")
    wait_for(
        lambda: LLMCall.objects.filter(run_id=run_id, status="started").exists(), timeout=30, message="the model call"
    )
    first_pid = rabbitmq_worker.process.pid

    # SIGKILL: no acknowledgement. RabbitMQ requeues the message when the connection drops; a
    # new worker gets it and claims the run once the dead worker's lease has lapsed.
    rabbitmq_worker.kill()
    wait_for(
        lambda: Run.objects.filter(pk=run_id, lease_expires_at__lt=timezone.now()).exists(),
        timeout=30,
        message="the dead worker's lease to lapse",
    )
    rabbitmq_worker.start()

    # Nothing sweeps here (no beat, no sweeper call): only the redelivered message can resume it.
    run = wait_for(lambda: Run.objects.filter(pk=run_id, status="completed").first(), timeout=60, message="the run")
    assert _claimed_by(run) == [first_pid, rabbitmq_worker.process.pid]
    assert run.recoveries == 0
    answer = Message.objects.filter(run=run, role="assistant").order_by("-order").first()
    assert answer.content == "answered after the restart"
    # The call cut off by the kill is closed, not left open, and no step was answered twice.
    assert not LLMCall.objects.filter(run=run, status="started").exists()
    assert LLMCall.objects.filter(run=run, status="succeeded").count() == 1


def test_the_compose_worker_health_check_answers_through_rabbitmq(rabbitmq_worker):
    """The compose file's probe, with this worker's node name for the container's host name."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    probe = compose["x-worker-healthcheck"]["test"]
    assert probe[0] == "CMD-SHELL" and "celery@$$HOSTNAME" in probe[1]
    node = f"worker-rabbitmq-{rabbitmq_worker.starts}@{socket.gethostname()}"
    command = probe[1].replace("celery@$$HOSTNAME", node).replace("--timeout 10", "--timeout 5")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "CELERY_BROKER_URL": RABBITMQ_URL,
        "DATABASE_URL": _database_url(),
    }

    assert subprocess.run(["sh", "-c", command], cwd=ROOT, env=env, timeout=60).returncode == 0
    rabbitmq_worker.stop()
    assert subprocess.run(["sh", "-c", command], cwd=ROOT, env=env, timeout=60).returncode != 0
