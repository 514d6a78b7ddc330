#!/usr/bin/env bash
# Runs the whole test suite against the real PostgreSQL and Redis on this machine.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_venv requirements-dev.txt
ensure_services
export DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/agentry}"
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/14}"
export CELERY_BROKER_URL="$REDIS_URL"
export AGENTRY_TOOL_MODULES="tools.builtin.demo,tools.builtin.common,tests.tool_fixtures"
# The suite's own HTTP and MCP servers listen on loopback (random ports); the guard tests
# override this to prove loopback is refused when it is not allowlisted.
export AGENTRY_OUTBOUND_ALLOWLIST="127.0.0.1"
# The suite runs several processes on one PostgreSQL (tests, workers, API servers): small pools
# keep them well under its connection limit.
export AGENTRY_DB_POOL_MAX_SIZE=10
export AGENTRY_RUN_LEASE_SECONDS=3
export AGENTRY_QUEUED_REENQUEUE_SECONDS=5
export AGENTRY_RETRY_BASE_SECONDS=0.05
export AGENTRY_RETRY_MAX_SECONDS=2
export AGENTRY_WEBHOOK_RETRY_BASE_SECONDS=0.2
export AGENTRY_WEBHOOK_RETRY_MAX_SECONDS=1
export SECRET_KEY="test-secret-key"
exec .venv/bin/python -m pytest "$@"
