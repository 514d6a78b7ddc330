"""Configuration by environment: every variable the code reads is listed in .env.example and in
the tables of docs/configuration.md and reaches the compose containers; the settings fill in
unset variables from a .env file, the environment winning; the broker settings fit Redis and
RabbitMQ."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
# The code that runs in production: the apps, the settings and the shipped model server; the
# suite's settings read variables of their own (TEST_DATABASE_URL, …) that no deployment sets.
PACKAGES = (
    "platform_site",
    "tools",
    "agents",
    "conversations",
    "engine",
    "alerts",
    "evals",
    "api",
    "console",
    "demo",
    "fakellm",
)
SUITE_ONLY = {ROOT / "platform_site" / "settings_test.py"}
# Set by the image, not by an operator; and read before any .env, so never from one.
NOT_PASSED_TO_CONTAINERS = {"STATIC_ROOT", "AGENTRY_ENV_FILE"}


def _is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _environ_key(node: ast.AST) -> ast.AST | None:
    """The name expression of a read of the environment: os.environ.get(k), os.getenv(k),
    os.environ[k], k in os.environ. Writes (setdefault, assignment) are not reads."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        if node.func.attr == "get" and _is_os_environ(node.func.value):
            return node.args[0]
        if node.func.attr == "getenv" and isinstance(node.func.value, ast.Name) and node.func.value.id == "os":
            return node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_os_environ(node.value):
        return node.slice
    if isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
        if any(_is_os_environ(c) for c in node.comparators):
            return node.left
    return None


def environment_reads(tree: ast.Module) -> tuple[set[str], list[int]]:
    """Variable names a module reads, directly or through one of its functions that reads the
    variable named by its first parameter (settings' env_bool, env_list); and the lines of reads
    whose name is computed, which no list can be checked against."""
    helpers, helper_reads = set(), set()
    for function in (node for node in tree.body if isinstance(node, ast.FunctionDef)):
        parameters = function.args.args
        if not parameters:
            continue
        for node in ast.walk(function):
            key = _environ_key(node)
            if isinstance(key, ast.Name) and key.id == parameters[0].arg:
                helpers.add(function.name)
                helper_reads.add(node)
    names, computed = set(), []
    for node in ast.walk(tree):
        if node in helper_reads:
            continue
        key = _environ_key(node)
        if key is None and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            key = node.args[0] if node.func.id in helpers else None
        if key is None:
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            names.add(key.value)
        else:
            computed.append(node.lineno)
    return names, computed


@pytest.fixture(scope="module")
def code_reads() -> tuple[set[str], list[str]]:
    names, computed = set(), []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in SUITE_ONLY:
                continue
            found, lines = environment_reads(ast.parse(path.read_text(), filename=str(path)))
            names |= found
            computed += [f"{path.relative_to(ROOT)}:{line}" for line in lines]
    return names, computed


def _env_example() -> set[str]:
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))


def _readme_tables() -> set[str]:
    """Variables named in the first column of the `| variable | default | meaning |` tables of
    the README and the guides in docs/ (docs/configuration.md holds the full list)."""
    names, in_table = set(), False
    text = "\n".join(path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    for line in text.splitlines():
        if re.match(r"\|\s*variable\s*\|", line):
            in_table = True
        elif in_table and line.startswith("|"):
            names |= set(re.findall(r"`([A-Z][A-Z0-9_]*)`", line.split("|")[1]))
        else:
            in_table = False
    return names


def _compose(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def test_the_scan_finds_direct_and_helper_reads_and_reports_computed_names():
    source = """
import os

def env_flag(name, default):
    return os.environ.get(name, default)

A = os.environ.get("A_VAR", "1")
B = os.environ["B_VAR"]
C = env_flag("C_VAR", True)
D = os.getenv("D_VAR")
E = "E_VAR" in os.environ
os.environ.setdefault("NOT_A_READ", "x")
F = os.environ.get("F_" + "VAR")
"""
    names, computed = environment_reads(ast.parse(source))
    assert names == {"A_VAR", "B_VAR", "C_VAR", "D_VAR", "E_VAR"}
    assert computed == [13]


def test_the_code_reads_every_variable_by_its_literal_name(code_reads):
    names, computed = code_reads
    assert computed == [], f"environment reads with a computed name cannot be listed: {computed}"
    # The scan sees the settings' direct and helper reads and the management commands' reads.
    assert {"DATABASE_URL", "DEBUG", "ALLOWED_HOSTS", "CELERY_BROKER_URL", "AGENTRY_ADMIN_PASSWORD"} <= names


def test_env_example_lists_every_variable_the_code_reads(code_reads):
    missing = code_reads[0] - _env_example()
    assert not missing, f"add these to .env.example (commented, with their defaults): {sorted(missing)}"


def test_readme_tables_list_every_variable_the_code_reads(code_reads):
    missing = code_reads[0] - _readme_tables()
    assert not missing, f"add these to the variables table of docs/configuration.md: {sorted(missing)}"


def test_env_example_lists_nothing_that_neither_the_code_nor_compose_reads(code_reads):
    interpolated = set()
    for name in ("docker-compose.yml", "docker-compose.rabbitmq.yml"):
        interpolated |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (ROOT / name).read_text()))
    stale = _env_example() - code_reads[0] - interpolated
    assert not stale, f".env.example lists variables nothing reads: {sorted(stale)}"


def test_compose_hands_every_variable_to_the_app_containers(code_reads):
    compose = _compose("docker-compose.yml")
    # `VAR:` without a value passes VAR through from .env or the shell when it is set there.
    handed = set(compose["x-agentry-env"]) | set(compose["services"]["migrate"]["environment"])
    missing = code_reads[0] - NOT_PASSED_TO_CONTAINERS - handed
    assert not missing, f"add these to x-agentry-env in docker-compose.yml: {sorted(missing)}"


def test_compose_probes_the_web_and_every_worker_and_runs_unprivileged():
    services = _compose("docker-compose.yml")["services"]
    workers = [name for name, service in services.items() if "worker" in service.get("command", [])]
    assert sorted(workers) == ["worker", "worker-maintenance"]
    # One worker per queue kind, and every queue a task is routed to has one.
    queues = {services[name]["command"][services[name]["command"].index("-Q") + 1] for name in workers}
    assert queues == {"llm", "maintenance"}
    for name in ["web", *workers, "flower"]:
        assert services[name]["healthcheck"]["test"], name
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER 10001:10001$", dockerfile, flags=re.MULTILINE)
    assert "collectstatic" in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert {".env", ".git", ".venv", "var"} <= set(ignored)


# --- the settings read a .env file ------------------------------------------------------------

SETTINGS_PROBE = """
import json
import django
from django.conf import settings
django.setup()
print(json.dumps({name: getattr(settings, name) for name in %r}, default=str))
"""


def _settings(tmp_path, names: list[str], env: dict) -> subprocess.CompletedProcess:
    """The production settings, loaded in a fresh interpreter with only `env` (and the
    embedded database) in its environment."""
    return subprocess.run(
        [sys.executable, "-c", SETTINGS_PROBE % (names,)],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "DJANGO_SETTINGS_MODULE": "platform_site.settings",
            "AGENTRY_VAR_DIR": str(tmp_path / "var"),
            "DATABASE_URL": "",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def _values(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_settings_fill_in_unset_variables_from_the_env_file_and_the_environment_wins(tmp_path):
    env_file = tmp_path / "agentry.env"
    env_file.write_text(
        "# an operator's file\n"
        "AGENTRY_RUN_LEASE_SECONDS=42\n"
        'AGENTRY_API_RATE="30/min"\n'
        "TIME_ZONE=Asia/Shanghai\n"
        "REDIS_URL=redis://127.0.0.1:6379/9\n"
    )
    values = _values(
        _settings(
            tmp_path,
            ["AGENTRY_RUN_LEASE_SECONDS", "AGENTRY_API_RATE", "TIME_ZONE", "REDIS_URL", "CELERY_BROKER_URL"],
            # Set in the environment, even empty: the file does not override it.
            {"AGENTRY_ENV_FILE": str(env_file), "TIME_ZONE": "UTC", "REDIS_URL": ""},
        )
    )
    assert values == {
        "AGENTRY_RUN_LEASE_SECONDS": 42,
        "AGENTRY_API_RATE": "30/min",
        "TIME_ZONE": "UTC",
        "REDIS_URL": "",
        "CELERY_BROKER_URL": "filesystem://localhost/",
    }


def test_an_env_file_named_but_missing_stops_the_settings(tmp_path):
    result = _settings(tmp_path, ["DEBUG"], {"AGENTRY_ENV_FILE": str(tmp_path / "nowhere.env")})
    assert result.returncode != 0
    assert f"AGENTRY_ENV_FILE names {tmp_path / 'nowhere.env'}, which is not a file." in result.stderr


def test_an_empty_env_file_setting_means_no_file_rather_than_a_missing_one(tmp_path):
    values = _values(_settings(tmp_path, ["AGENTRY_RUN_LEASE_SECONDS"], {"AGENTRY_ENV_FILE": ""}))
    assert values == {"AGENTRY_RUN_LEASE_SECONDS": 60}


# --- broker settings --------------------------------------------------------------------------

BROKER_SETTINGS = ["CELERY_BROKER_URL", "AGENTRY_BROKER_KIND", "CELERY_BROKER_TRANSPORT_OPTIONS"]


def test_rabbitmq_broker_takes_no_redis_visibility_timeout(tmp_path):
    values = _values(
        _settings(
            tmp_path,
            BROKER_SETTINGS,
            {"AGENTRY_ENV_FILE": "", "CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//"},
        )
    )
    assert values["AGENTRY_BROKER_KIND"] == "rabbitmq"
    assert values["CELERY_BROKER_TRANSPORT_OPTIONS"] == {}


def test_redis_visibility_timeout_outlives_the_longest_webhook_countdown_and_task(tmp_path):
    values = _values(
        _settings(
            tmp_path,
            [*BROKER_SETTINGS, "AGENTRY_BROKER_MAX_HOLD_SECONDS"],
            {
                "AGENTRY_ENV_FILE": "",
                # An empty broker URL counts as unset: the broker follows REDIS_URL.
                "CELERY_BROKER_URL": "",
                "REDIS_URL": "redis://127.0.0.1:6379/9",
                "AGENTRY_WEBHOOK_RETRY_MAX_SECONDS": "7200",
                "CELERY_TASK_TIME_LIMIT": "900",
            },
        )
    )
    assert values["CELERY_BROKER_URL"] == "redis://127.0.0.1:6379/9"
    assert values["AGENTRY_BROKER_KIND"] == "redis"
    assert values["AGENTRY_BROKER_MAX_HOLD_SECONDS"] == 8100
    assert values["CELERY_BROKER_TRANSPORT_OPTIONS"] == {"visibility_timeout": 8100}


def test_a_broker_that_is_neither_redis_nor_rabbitmq_is_refused(tmp_path):
    result = _settings(tmp_path, ["DEBUG"], {"AGENTRY_ENV_FILE": "", "CELERY_BROKER_URL": "sqs://key:secret@"})
    assert result.returncode != 0
    assert "CELERY_BROKER_URL must be a redis://, rediss://, amqp:// or amqps:// URL." in result.stderr


def test_a_web_process_serves_at_least_one_request_at_a_time(tmp_path):
    result = _settings(tmp_path, ["DEBUG"], {"AGENTRY_ENV_FILE": "", "AGENTRY_WEB_REQUEST_THREADS": "0"})
    assert result.returncode != 0
    assert "AGENTRY_WEB_REQUEST_THREADS must be at least 1." in result.stderr
    values = _values(_settings(tmp_path, ["AGENTRY_WEB_REQUEST_THREADS"], {"AGENTRY_ENV_FILE": ""}))
    assert values == {"AGENTRY_WEB_REQUEST_THREADS": 8}


def test_postgresql_statements_are_prepared_unless_a_pooler_forbids_it(tmp_path):
    postgres = {"AGENTRY_ENV_FILE": "", "DATABASE_URL": "postgres://agentry@127.0.0.1:5432/agentry"}
    options = _values(_settings(tmp_path, ["DATABASES"], postgres))["DATABASES"]["default"]["OPTIONS"]
    assert options["server_side_binding"] is True
    assert options["prepare_threshold"] == 1
    off = _values(_settings(tmp_path, ["DATABASES"], {**postgres, "AGENTRY_DB_PREPARE": "0"}))
    assert "server_side_binding" not in off["DATABASES"]["default"]["OPTIONS"]
    assert "prepare_threshold" not in off["DATABASES"]["default"]["OPTIONS"]
