import gc
import time
import uuid

import pytest
from django.db import connection
from django.utils import translation

from fakellm.testing import serve_in_thread
from tests.support import flush, passwords
from tests.support.embedded import BackgroundMigration
from tests.support.llm import FakeLLM
from tests.support.run_lock import RunLock
from tests.support.tool_fixtures import COUNTER_KEY, redis_client
from tests.support.workers import WorkerProcess

# Fixtures that start a process of the suite's own (a Celery worker, uvicorn): a test that uses
# one is end to end whatever it is marked, so the database tier (`-m "not (e2e or browser or fuzz)"`)
# never starts a worker or a web server because a mark was forgotten.
PROCESS_FIXTURES = frozenset({"worker", "worker_process", "api_server", "api_server_process"})
TIER_MARKS = ("e2e", "browser", "fuzz")


def pytest_configure(config):
    flush.install()
    passwords.install()
    config.pluginmanager.register(WorkerTestsFirst(), "worker-tests-first")
    # Two runs on one test database or Redis db would break each other: tests/support/run_lock.py.
    config.pluginmanager.register(RunLock(), "run-lock")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before `-m` selects (the mark plugin's hook runs after this one), and before pytest-django
    orders the rolled-back tests before the committing ones."""
    for item in items:
        if PROCESS_FIXTURES.intersection(item.fixturenames) and not any(map(item.get_closest_marker, TIER_MARKS)):
            item.add_marker(pytest.mark.e2e)
        if "scripted_agent" in item.fixturenames and item.get_closest_marker("django_db") is None:
            item.add_marker(pytest.mark.django_db(transaction=True))


class WorkerTestsFirst:
    """After pytest-django's ordering and `-m`'s selection: see _worker_tests_first."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        _worker_tests_first(items)


def _commits(item) -> bool:
    """Whether pytest-django runs the test as a TransactionTestCase (its ordering's rule)."""
    marker = item.get_closest_marker("django_db")
    if marker is not None and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences")):
        return True
    return bool({"transactional_db", "live_server"}.intersection(item.fixturenames))


def _worker_tests_first(items) -> None:
    """The committing tests that use the worker go first among the committing tests, in the same
    order otherwise: the worker is killed before every test that does not ask for it
    (pytest_runtest_setup), so each such test between two that do costs a start. Grouped by
    module, the e2e tier still went out of the worker's tests and back five times, in modules
    that mix both (the events stream, the chat completions, the operator pages); grouped by test,
    only the tests that kill it on purpose and the ones that leave it busy start it again. A
    module split this way sets its module fixtures up twice (a browser, a web server: a second,
    not the worker's seconds). pytest-django has put the committing tests together (after the
    rolled-back ones)."""
    committing = [index for index, item in enumerate(items) if _commits(item)]
    if not committing:
        return
    first, last = committing[0], committing[-1] + 1
    items[first:last] = sorted(items[first:last], key=lambda item: "worker" not in item.fixturenames)


@pytest.fixture(scope="session")
def fake_llm():
    base_url, stop = serve_in_thread()
    fake = FakeLLM(base_url)
    yield fake
    fake.http.close()
    stop()


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class SuiteWorker(WorkerProcess):
    """The suite's worker. A test that kills it (crash recovery, chaos) leaves the deliveries the
    dead process held in kombu's unacked record until the broker is emptied after the test: they
    are remembered here, so that they do not make the worker that took over look busy
    (_worker_idle) and cost it a restart. No other process takes from the suite's broker, and a
    dead process adds nothing, so what the record holds right after the kill is the dead one's."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.orphaned: set[bytes] = set()

    def kill(self) -> None:
        was_alive = self.alive
        super().kill()
        if was_alive:
            self.orphaned |= _unacked_tags()


# The suite's worker process once `worker_process` made it: pytest_runtest_setup kills it before
# any test that does not ask for it, and the summary says how many times it was started.
_suite_worker: list[SuiteWorker] = []


@pytest.fixture(scope="session")
def worker_process(django_db_setup, django_db_blocker):
    """The suite's worker process, started by `worker` for the tests that ask for it."""
    if connection.vendor != "postgresql":
        pytest.skip("end-to-end tests need PostgreSQL (the test settings default to it)")
    redis_client().flushdb()
    process = SuiteWorker(database_url=_database_url())
    _suite_worker.append(process)
    yield process
    process.stop()


def pytest_collection_finish(session):
    """What exists once the tests are collected (Django, its apps and URLconf, the modules, the
    items) lives until the end: frozen out of the collector's reach, a full collection no longer
    walks its 600,000 objects. Full collections took 6 of 141 s of four folders of the database
    tier (about 200 ms each), and a fraction of that once frozen."""
    gc.collect()
    gc.freeze()
    if any("embedded_var_dir" in item.fixturenames for item in session.items):
        _embedded_migration.append(BackgroundMigration())


def pytest_unconfigure(config):
    for migration in _embedded_migration:
        migration.discard()


def pytest_runtest_setup(item):
    """A worker left alive by the tests before is killed before a test that does not ask for one:
    it would run the tasks that test sends (to the broker, on its rows), as no test expects."""
    if "worker" not in item.fixturenames:
        for process in _suite_worker:
            if process.alive:
                process.kill()
                _broker_emptied()


def pytest_terminal_summary(terminalreporter):
    for process in _suite_worker:
        terminalreporter.write_line(f"worker processes started: {process.starts}")


def _broker_emptied() -> None:
    """The suite's broker as no test left it: the tasks tests sent (their rows are emptied with
    their tables, so none may run in another test), and kombu's record of deliveries held by a
    worker that was killed (which would otherwise stay in Redis for the rest of the session)."""
    from platform_site.celery import app

    app.control.purge()
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        if hasattr(channel, "unacked_key"):  # kombu's Redis transport
            channel.client.delete(channel.unacked_key, channel.unacked_index_key, channel.unacked_mutex_key)


def _unacked_tags() -> set[bytes]:
    """The delivery tags in kombu's record of tasks delivered and not yet acknowledged (Redis)."""
    from platform_site.celery import app

    with app.connection_for_write() as broker:
        channel = broker.default_channel
        return set(channel.client.hkeys(channel.unacked_key)) if hasattr(channel, "unacked_key") else set()


def _worker_idle(timeout: float = 2, orphaned: set[bytes] = frozenset()) -> bool:
    """Whether the worker holds nothing of the test that ended, with the broker emptied of what
    the test sent: no task delivered to it (kombu's Redis transport keeps every delivered task in
    its unacked hash until the worker acknowledges it after running it, ETA tasks included;
    `orphaned` are those a killed worker held, see SuiteWorker) and no run under a lease. Seen
    twice in a row, a moment apart, so that a task a finishing run sent is not missed. Waits
    `timeout` for a run ending its last step; False on a transport with no such record."""
    from conversations.models import Run, RunStatus
    from platform_site.celery import app

    deadline = time.monotonic() + timeout
    seen_idle = 0
    with app.connection_for_write() as broker:
        channel = broker.default_channel
        if not hasattr(channel, "unacked_key"):
            return False
        while seen_idle < 2:
            app.control.purge()
            busy = set(channel.client.hkeys(channel.unacked_key)) - orphaned or (
                Run.objects.filter(status=RunStatus.RUNNING).exclude(lease_owner="").exists()
            )
            seen_idle = 0 if busy else seen_idle + 1
            if busy and time.monotonic() > deadline:
                return False
            time.sleep(0.05)
    return True


@pytest.fixture
def worker(worker_process, transactional_db):
    """A live worker for this test, started on an emptied broker. When the test ends, before its
    tables are emptied (this fixture needs transactional_db, so it is torn down first), the
    broker is emptied again and the worker is killed unless it is idle (see _worker_idle): a task
    another test sent never runs against this test's rows, and this test's tasks never run during
    another test or its teardown (a worker alive for the whole session once took a webhook
    delivery a test without one had sent, and wrote its attempt while that test's tables were
    being emptied). An idle worker serves the next test if that one asks for a worker too, and
    is killed before any other (pytest_runtest_setup): a start costs 2-3 s, and about a hundred
    tests ask for a worker, most of them one after another."""
    _broker_emptied()
    worker_process.orphaned.clear()
    if not worker_process.alive:
        worker_process.start()
    yield worker_process
    if not _worker_idle(orphaned=worker_process.orphaned):
        worker_process.kill()
    _broker_emptied()
    worker_process.orphaned.clear()


@pytest.fixture
def executions():
    """Read how many times test-counter really ran, per label (outside witness in Redis)."""
    client = redis_client()
    client.delete(COUNTER_KEY)

    def count(label: str) -> int:
        return int(client.hget(COUNTER_KEY, label) or 0)

    return count


@pytest.fixture
def sent_deliveries(monkeypatch):
    """Webhook delivery ids handed to the broker after commit (kept off it: the test sends them
    itself, or not at all)."""
    from notifications.deliveries import WEBHOOK_DELIVER_TASK
    from platform_site.celery import app

    sent = []
    monkeypatch.setattr(app.tasks[WEBHOOK_DELIVER_TASK], "delay", lambda delivery_id: sent.append(delivery_id))
    return sent


@pytest.fixture
def no_enqueue(monkeypatch, sent_deliveries):
    """For engine tests that drive runs in-process: keep runs and webhook deliveries off the
    broker, where nothing should be left for a later test's worker (which starts on emptied
    queues anyway: see `worker`)."""
    from engine import tasks

    sent = []
    monkeypatch.setattr(tasks.run_advance_task, "delay", lambda run_id: sent.append(run_id))
    # A completed run of a version with memory enqueues its extraction (engine.memory): tests
    # that want it run it themselves.
    monkeypatch.setattr(tasks.memory_extract_task, "delay", lambda run_id: None)
    return sent


@pytest.fixture
def scripted_agent(fake_llm, db, no_enqueue):
    """make(script_dict, tools=[...], **agent_fields) → an agent whose model follows the script.

    A test without a django_db mark of its own commits (pytest_collection_modifyitems marks it
    `transaction=True`): runs driven in-process are what production runs only in autocommit.
    One marked plain `django_db` rolls back (docs/testing.md says which may)."""
    from tests.support.factories import ModelConfigFactory, make_agent

    def make(script: dict, *, tools=(), model_fields=None, **fields):
        name = fake_llm.script(f"s-{uuid.uuid4().hex[:10]}", script)
        model = ModelConfigFactory(**{"base_url": fake_llm.api_base, "model": name, **(model_fields or {})})
        return make_agent(tools=list(tools), model_config=model, **fields)

    return make


# The embedded stack's migration, started by pytest_collection_finish when a test of the run
# needs it (tests.support.embedded.BackgroundMigration).
_embedded_migration: list[BackgroundMigration] = []


@pytest.fixture(scope="session")
def _embedded_template():
    if not _embedded_migration:
        _embedded_migration.append(BackgroundMigration())
    return _embedded_migration[0].migrated()


@pytest.fixture
def embedded_var_dir(_embedded_template, tmp_path):
    """A var directory of the embedded stack (SQLite, the filesystem broker) with its database
    freshly migrated: a copy of one migrated once for the session (tests/support/embedded.py)."""
    from tests.support.embedded import var_dir_copy

    return var_dir_copy(_embedded_template, tmp_path / "var")


@pytest.fixture
def agent():
    """The suite's plain agent (tests.support.factories): slug "helper", the test-echo tool, a model
    config that is never called. A module whose tests need another agent has a fixture of its own,
    named for what differs (`prompted_agent`, `agent_with_fallback`, `enqueuing_agent`...)."""
    from tests.support.factories import make_agent

    return make_agent(tools=["test-echo"], slug="helper")


@pytest.fixture(scope="session")
def api_server_process(django_db_setup, django_db_blocker):
    """The ASGI app under a real uvicorn, on the test database."""
    from tests.support.api_server import ApiServer

    if connection.vendor != "postgresql":
        pytest.skip("end-to-end tests need PostgreSQL (the test settings default to it)")
    # Named, so a test can count the server's own database connections.
    server = ApiServer(database_url=_database_url() + "?application_name=agentry-test-web").start()
    yield server
    server.stop()


@pytest.fixture
def api_server(api_server_process, transactional_db):
    return api_server_process


@pytest.fixture(autouse=True)
def _language_reset():
    """Each test starts in the default language: LocaleMiddleware activates a request's language
    for the thread and leaves it active, so a test that fetched a page in Chinese made a later
    test's command errors Chinese, and tiers run in another order failed where a full run passed."""
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _snapshots_forgotten():
    """Version snapshots are cached by id for the process; SQLite hands a rolled-back test's ids
    out again, so a test must not find the snapshot of an earlier test's version under its own."""
    from engine.snapshots import version_snapshot

    version_snapshot.cache_clear()
