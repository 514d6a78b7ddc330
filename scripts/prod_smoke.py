"""Production smoke test, run by the interpreter of a virtualenv that has requirements.txt only
(scripts/prod_smoke.sh makes it): migrate a fresh PostgreSQL database, start the shipped fake
model, a Celery worker on Redis and the ASGI web, post one message through the API and wait for
its run to complete. Every process it starts is stopped on the way out, whatever happened.

Environment: SMOKE_DATABASE_URL (its database is dropped and created), SMOKE_REDIS_URL (its
database is flushed).
"""

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from platform_site.worker_command import web_argv, worker_argv  # noqa: E402  (the project root is on the path only now)

QUESTION = "我在成都，明天天气如何？"  # seed 000's one-tool question: a model call, a tool, a model call
TERMINAL = {"completed", "failed", "cancelled", "expired"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def recreate_database(url: str) -> None:
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def wait_until(predicate, *, timeout: float, what: str, processes: list) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for name, process, log in processes:
            if process.poll() is not None:
                raise SystemExit(f"{name} exited with {process.returncode}:\n{Path(log).read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> int:
    database_url, redis_url = os.environ["SMOKE_DATABASE_URL"], os.environ["SMOKE_REDIS_URL"]
    work = Path(tempfile.mkdtemp(prefix="agentry-prod-smoke-"))
    llm_port, web_port = free_port(), free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "AGENTRY_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "AGENTRY_VAR_DIR": str(work),
        "AGENTRY_OUTBOUND_ALLOWLIST": f"127.0.0.1:{llm_port}",
        "AGENTRY_DB_POOL_MAX_SIZE": "4",
        "PYTHONUNBUFFERED": "1",
    }
    recreate_database(database_url)
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run(
        [*manage, "agentry_seed_demo", "--llm-base-url", f"http://127.0.0.1:{llm_port}/v1"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    token = (
        subprocess.run(
            [
                *manage,
                "shell",
                "-c",
                "from django.contrib.auth.models import User; from conversations.tokens import api_token_create; "
                "from workspaces.membership import membership_set; from workspaces.models import Workspace; "
                "u = User.objects.create_user(username='smoke', password=None); "
                # The demo seeds a second workspace: a new account joins one only when asked to.
                "w = Workspace.objects.get(slug='default'); membership_set(user=u, workspace=w, role='custom'); "
                "print(api_token_create(user=u, name='smoke', workspace=w)[1])",
            ],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )

    commands = {
        "fakellm": [sys.executable, "-m", "fakellm", "--host", "127.0.0.1", "--port", str(llm_port)],
        "worker": worker_argv(concurrency=4),
        "web": web_argv(port=web_port),
    }
    processes = []
    try:
        for name, command in commands.items():
            log = work / f"{name}.log"
            process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True
            )
            processes.append((name, process, log))
        base = f"http://127.0.0.1:{web_port}"
        wait_until(
            lambda: answers(f"http://127.0.0.1:{llm_port}/v1/models"),
            timeout=60,
            what="the fake model",
            processes=processes,
        )
        wait_until(
            lambda: b" ready." in (work / "worker.log").read_bytes(), timeout=90, what="the worker", processes=processes
        )
        wait_until(lambda: answers(f"{base}/health/"), timeout=60, what="the web", processes=processes)

        api = httpx.Client(base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        conversation = api.post("/conversations/", json={"agent": "customer-service"})
        conversation.raise_for_status()
        posted = api.post(f"/conversations/{conversation.json()['id']}/messages/", json={"content": QUESTION})
        if posted.status_code != 202:
            raise SystemExit(f"posting the message answered {posted.status_code}: {posted.text}")
        run_id = posted.json()["id"]
        run = {}
        wait_until(
            lambda: run.update(api.get(f"/runs/{run_id}/").json()) or run.get("status") in TERMINAL,
            timeout=90,
            what=f"run {run_id} to end",
            processes=processes,
        )
        if run["status"] != "completed":
            raise SystemExit(f"run {run_id} ended {run['status']} ({run.get('stop_reason')}); logs in {work}")
        print(f"prod smoke: run {run_id} completed through web and worker installed from requirements.txt alone")
        return 0
    finally:
        for _name, process, _log in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _name, process, _log in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
