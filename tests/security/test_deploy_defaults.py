"""Safe deploy defaults: the compose stack refuses to start without secrets the operator chose,
its web environment passes `check --deploy`, logins are throttled, and requirements.txt alone
has everything the web and a Redis-backed worker import."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from importlib.metadata import distribution
from pathlib import Path

import pytest
import yaml
from cryptography.fernet import Fernet
from django.contrib.auth.models import User
from django.core.cache import caches
from django.test import Client
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import _database_url

ROOT = Path(__file__).resolve().parent.parent.parent

REQUIRED = {
    "SECRET_KEY": "k" * 20 + uuid.uuid4().hex + uuid.uuid4().hex,
    "AGENTRY_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
    "POSTGRES_PASSWORD": "pg-" + uuid.uuid4().hex,
    "AGENTRY_ADMIN_PASSWORD": "admin-" + uuid.uuid4().hex,
    "FLOWER_BASIC_AUTH": "ops:flower-" + uuid.uuid4().hex,
}


def _compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    if shutil.which("docker-compose"):
        return [shutil.which("docker-compose")]
    pytest.skip("neither `docker compose` nor `docker-compose` is installed (.ci/run installs it)")


def _compose_config(tmp_path, variables: dict) -> subprocess.CompletedProcess:
    # Only these variables: not the test run's own SECRET_KEY, nor a developer's .env file.
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    return subprocess.run(
        [*_compose_command(), "--env-file", str(env_file), "-f", str(ROOT / "docker-compose.yml"), "config"],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **variables},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def compose(tmp_path) -> dict:
    result = _compose_config(tmp_path, REQUIRED)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_compose_refuses_to_start_without_each_secret(tmp_path, missing):
    result = _compose_config(tmp_path, {k: v for k, v in REQUIRED.items() if k != missing})
    assert result.returncode != 0
    assert f"set {missing}" in result.stderr


def test_compose_uses_the_operators_secrets_and_binds_to_loopback(compose):
    services = compose["services"]
    rendered = json.dumps(compose)
    assert "change-me" not in rendered and "admin:admin" not in rendered
    web = services["web"]["environment"]
    assert web["SECRET_KEY"] == REQUIRED["SECRET_KEY"]
    assert web["AGENTRY_ENCRYPTION_KEYS"] == REQUIRED["AGENTRY_ENCRYPTION_KEYS"]
    assert web["DATABASE_URL"] == f"postgres://agentry:{REQUIRED['POSTGRES_PASSWORD']}@postgres:5432/agentry"
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == REQUIRED["POSTGRES_PASSWORD"]
    assert services["migrate"]["environment"]["AGENTRY_ADMIN_PASSWORD"] == REQUIRED["AGENTRY_ADMIN_PASSWORD"]
    assert "AGENTRY_ADMIN_PASSWORD" not in web  # only the one-shot job that creates the superuser
    assert services["flower"]["environment"]["FLOWER_BASIC_AUTH"] == REQUIRED["FLOWER_BASIC_AUTH"]
    for name in ("web", "flower"):
        for port in services[name]["ports"]:
            published = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port['published']}"
            assert published.startswith("127.0.0.1:"), (name, port)


def _check_deploy(tmp_path, environment: dict) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ["PATH"],
        # A pass-through variable the operator left unset (rendered null) is absent in the container.
        **{k: str(v) for k, v in environment.items() if v is not None},
        # Paths inside the image; this machine has neither.
        "AGENTRY_VAR_DIR": str(tmp_path / "var"),
        "STATIC_ROOT": str(tmp_path / "static"),
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_web_environment_of_compose(tmp_path, compose):
    result = _check_deploy(tmp_path, compose["services"]["web"]["environment"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_deploy_refuses_an_encryption_key_derived_from_secret_key(tmp_path, compose):
    environment = {k: v for k, v in compose["services"]["web"]["environment"].items() if k != "AGENTRY_ENCRYPTION_KEYS"}
    result = _check_deploy(tmp_path, environment)
    assert result.returncode != 0 and "agentry.E001" in result.stderr

    result = _check_deploy(tmp_path, {**environment, "AGENTRY_ENCRYPTION_KEYS": "not-a-fernet-key"})
    assert result.returncode != 0 and "agentry.E002" in result.stderr


# --- login throttling ---------------------------------------------------------------------

LOGIN_PAGES = ["/admin/login/?next=/admin/", "/approvals/login/?next=/approvals/"]


def _login(url: str, username: str, password: str, address: str) -> tuple[Client, object]:
    client = Client()
    return client, client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


@pytest.fixture
def operator(db):
    return User.objects.create_user(username=f"ops-{uuid.uuid4().hex[:8]}", password="right-pass-1", is_staff=True)


@pytest.mark.parametrize("url", LOGIN_PAGES)
def test_failed_logins_lock_that_username_from_that_address(settings, operator, url):
    settings.AGENTRY_LOGIN_FAILURE_LIMIT = 3
    for _ in range(3):
        client, response = _login(url, operator.username, "wrong-guess", "203.0.113.7")
        assert response.status_code == 200 and not _logged_in(client)

    client, refused = _login(url, operator.username, "right-pass-1", "203.0.113.7")
    assert refused.status_code == 200 and not _logged_in(client)
    assert "Too many failed logins for this account from your address" in refused.content.decode()

    # The same password from another address, or another account from this one, still works.
    client, response = _login(url, operator.username, "right-pass-1", "198.51.100.2")
    assert response.status_code == 302 and _logged_in(client)
    colleague = User.objects.create_user(username=f"ops-{uuid.uuid4().hex[:8]}", password="other-pass-2", is_staff=True)
    client, response = _login(url, colleague.username, "other-pass-2", "203.0.113.7")
    assert response.status_code == 302 and _logged_in(client)


def test_a_successful_login_clears_the_failures(settings, operator):
    settings.AGENTRY_LOGIN_FAILURE_LIMIT = 3
    url = LOGIN_PAGES[0]
    for _ in range(2):
        _login(url, operator.username, "wrong-guess", "203.0.113.8")
    assert _login(url, operator.username, "right-pass-1", "203.0.113.8")[1].status_code == 302
    for _ in range(2):
        _login(url, operator.username, "wrong-guess", "203.0.113.8")
    client, response = _login(url, operator.username, "right-pass-1", "203.0.113.8")
    assert response.status_code == 302 and _logged_in(client)


@pytest.fixture
def dead_redis_cache(settings):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{port}/0",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    return caches["default"]


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_login_while_redis_is_down_follows_the_failure_policy(settings, operator, dead_redis_cache, policy):
    settings.AGENTRY_REDIS_FAILURE = policy
    client, response = _login(LOGIN_PAGES[1], operator.username, "right-pass-1", "203.0.113.9")
    if policy == "open":
        assert response.status_code == 302 and _logged_in(client)
    else:
        assert response.status_code == 200 and not _logged_in(client)
        assert "Logging in is unavailable at the moment" in response.content.decode()


# --- a production install from requirements.txt alone ---------------------------------------


def _requirements_closure(path: Path) -> set[str]:
    """Distributions that `pip install -r path` installs: the pins and, recursively, what they
    require (with their extras), read from the metadata of this environment."""
    lines = [re.sub(r"#.*", "", line).strip() for line in path.read_text().splitlines()]
    stack, seen, names = [Requirement(line) for line in lines if line], set(), set()
    while stack:
        requirement = stack.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        names.add(key[0])
        for spec in distribution(requirement.name).requires or []:
            sub = Requirement(spec)
            if sub.marker is None or any(sub.marker.evaluate({"extra": extra}) for extra in requirement.extras or {""}):
                stack.append(sub)
    return names


# Runs in a fresh interpreter in which every module of a distribution outside requirements.txt
# is missing, as in a production virtualenv; then loads what the web and a worker load.
PRODUCTION_IMPORTS = r"""
import importlib.abc, importlib.metadata, json, os, re, sys

allowed = set(json.loads(os.environ["ALLOWED_DISTRIBUTIONS"]))
owners = importlib.metadata.packages_distributions()

class NotInRequirements(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        dists = owners.get(fullname.partition(".")[0])
        if dists and not any(re.sub(r"[-_.]+", "-", d).lower() in allowed for d in dists):
            raise ModuleNotFoundError(f"No module named {fullname!r} ({', '.join(dists)} is not in requirements.txt)",
                                      name=fullname)
        return None

sys.meta_path.insert(0, NotInRequirements())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
from platform_site.asgi import application
import platform_site.urls, uvicorn.main, flower.command, fakellm.__main__
import celery.bin.celery, celery.apps.worker, celery.concurrency.thread
from django.db import connection
from platform_site.celery import app
app.loader.import_default_modules()
connection.ensure_connection()
with app.connection_for_write() as broker:
    broker.ensure_connection(max_retries=1)
    broker.default_channel.client.ping()
print("imports ok", broker.transport_cls)
"""


def test_requirements_txt_alone_runs_the_web_and_a_redis_worker(db):
    if not os.environ.get("CELERY_BROKER_URL", "").startswith("redis://"):
        pytest.skip("needs the Redis broker (the test settings default to it)")
    allowed = sorted(_requirements_closure(ROOT / "requirements.txt"))
    # The production settings module, not the suite's, on the suite's database and broker.
    result = subprocess.run(
        [sys.executable, "-c", PRODUCTION_IMPORTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "platform_site.settings",
            "DATABASE_URL": _database_url(),
            "ALLOWED_DISTRIBUTIONS": json.dumps(allowed),
        },
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "imports ok redis" in result.stdout
