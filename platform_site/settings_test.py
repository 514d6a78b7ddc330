"""Settings of the test suite: the base settings with the suite's values.

The suite runs against a real PostgreSQL and Redis (TEST_DATABASE_URL / TEST_REDIS_URL, or
DATABASE_URL / REDIS_URL when those are set). The values go in as environment defaults before the
base settings are read, because that module derives several settings from them (the connection
pool, the broker, the cache, the webhook allowlist); the workers and web servers the tests start
inherit the same environment and DJANGO_SETTINGS_MODULE, so every process runs with one
configuration. A variable already set in the environment wins, even when empty (a test may start
a server with REDIS_URL empty to run it without Redis).
"""

import os

_REDIS_URL = os.environ.get("TEST_REDIS_URL") or "redis://127.0.0.1:6379/14"

SUITE_ENVIRONMENT = {
    "DATABASE_URL": os.environ.get("TEST_DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/agentry",
    "REDIS_URL": _REDIS_URL,
    # With only REDIS_URL given, the broker follows it, as in the base settings.
    "CELERY_BROKER_URL": os.environ.get("REDIS_URL") or _REDIS_URL,
    "SECRET_KEY": "test-secret-key",
    "AGENTRY_TOOL_MODULES": "demo.tools,tools.builtin.common,tests.support.tool_fixtures",
    # The suite's own HTTP and MCP servers listen on loopback (random ports); the guard tests
    # override this to prove loopback is refused when it is not allowlisted.
    "AGENTRY_OUTBOUND_ALLOWLIST": "127.0.0.1",
    # Several processes share one PostgreSQL (tests, workers, API servers): small pools keep them
    # well under its connection limit.
    "AGENTRY_DB_POOL_MAX_SIZE": "10",
    # Short leases, re-enqueues and backoffs, so crash, retry and recovery tests end in seconds.
    "AGENTRY_RUN_LEASE_SECONDS": "3",
    "AGENTRY_QUEUED_REENQUEUE_SECONDS": "5",
    "AGENTRY_RETRY_BASE_SECONDS": "0.05",
    "AGENTRY_RETRY_MAX_SECONDS": "2",
    "AGENTRY_WEBHOOK_RETRY_BASE_SECONDS": "0.2",
    "AGENTRY_WEBHOOK_RETRY_MAX_SECONDS": "1",
    # A developer's .env beside manage.py never leaks into the suite (or the processes it starts).
    "AGENTRY_ENV_FILE": "",
}
for _name, _value in SUITE_ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)

from platform_site.settings import *  # noqa: E402,F403

# Every JSON value PostgreSQL gets also goes through json.dumps, so a value only orjson accepts (a
# UUID, say) fails here rather than on an embedded install (platform_site.postgresql.jsonb).
AGENTRY_JSON_STANDARD_CHECK = True
