#!/usr/bin/env bash
# Runs the whole test suite against the real PostgreSQL and Redis on this machine. The suite's
# configuration is platform_site/settings_test.py (pytest.ini); TEST_DATABASE_URL and
# TEST_REDIS_URL point it at other servers.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_venv requirements-dev.txt
ensure_services
exec .venv/bin/python -m pytest "$@"
