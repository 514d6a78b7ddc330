#!/usr/bin/env bash
# A production install works from requirements.txt alone: installs it, and nothing else, into a
# scratch virtualenv (pip's cache makes repeats quick), then runs scripts/prod_smoke.py with it
# on this machine's PostgreSQL and Redis.
# Usage: bash scripts/prod_smoke.sh   (SMOKE_VENV, SMOKE_DATABASE_URL, SMOKE_REDIS_URL to override)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_services
venv="${SMOKE_VENV:-/tmp/agentry-prod-venv}"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt
"$venv/bin/pip" check
export SMOKE_DATABASE_URL="${SMOKE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/agentry_prod_smoke}"
export SMOKE_REDIS_URL="${SMOKE_REDIS_URL:-redis://127.0.0.1:6379/13}"
unset DATABASE_URL REDIS_URL CELERY_BROKER_URL SECRET_KEY AGENTRY_ENCRYPTION_KEYS AGENTRY_TOOL_MODULES
exec "$venv/bin/python" scripts/prod_smoke.py
