#!/usr/bin/env bash
# Brings Agentry up on the embedded defaults: SQLite, the filesystem broker (platform_site.fs_broker)
# and the shipped fake LLM server. No PostgreSQL, Redis or API key needed. Every process is
# supervised: one that exits is reported here and started again. Ctrl-C stops everything.
# Usage: bash scripts/dev.sh [--demo] [--reset-demo] [--flower]   (docs/embedded.md)
#   --demo        also runs seed 000's conversations, seed 001's customer-service system and the
#                 memory scene (one end user remembered across conversations) once
#   --reset-demo  puts seed 000's agent, tools and eval cases (with --demo, also seed 001's
#                 customer-service system and the memory demo agent) back to the shipped
#                 configuration; otherwise seeding only creates what is missing and keeps an
#                 operator's edits
#   --flower      also starts Flower (Celery's task and worker view) on 127.0.0.1:${FLOWER_PORT:-5555},
#                 behind the admin's user and password unless FLOWER_BASIC_AUTH says otherwise
# Environment it reads (all optional; docs/embedded.md § Ports and variables): PORT (web, 8000),
# DEMO_LLM_PORT (fake LLM, 8901), ORDERS_PORT (demo order service, 8902), FLOWER_PORT (5555),
# AGENTRY_DEMO_LLM_URL, AGENTRY_OUTBOUND_ALLOWLIST, AGENTRY_FLOWER_URL, FLOWER_BASIC_AUTH,
# AGENTRY_ADMIN_USERNAME / AGENTRY_ADMIN_PASSWORD, SESSION_COOKIE_SECURE / CSRF_COOKIE_SECURE.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

demo=0 flower=0 reset_demo=0
for arg in "$@"; do
  case "$arg" in
    --demo) demo=1 ;;
    --reset-demo) reset_demo=1 ;;
    --flower) flower=1 ;;
    *) echo "unknown option: $arg (usage: bash scripts/dev.sh [--demo] [--reset-demo] [--flower])" >&2; exit 2 ;;
  esac
done

ensure_venv requirements.txt
# Set empty rather than unset, so that a .env file (which fills in only unset variables) cannot
# point the embedded stack at a server.
export DATABASE_URL= REDIS_URL= CELERY_BROKER_URL=
# Plain HTTP on loopback: cookies marked Secure (the default outside DEBUG) would not come back
# from every browser.
export SESSION_COOKIE_SECURE="${SESSION_COOKIE_SECURE:-0}" CSRF_COOKIE_SECURE="${CSRF_COOKIE_SECURE:-0}"
DEMO_LLM_PORT="${DEMO_LLM_PORT:-8901}"
export AGENTRY_DEMO_LLM_URL="${AGENTRY_DEMO_LLM_URL:-http://127.0.0.1:$DEMO_LLM_PORT/v1}"
# The customer-service demo's order service (run below, for as long as the stack runs) listens on
# loopback, which the tools' outbound guard refuses unless it is listed; set the variable (even
# empty) to override.
ORDERS_PORT="${ORDERS_PORT:-8902}"
export AGENTRY_OUTBOUND_ALLOWLIST="${AGENTRY_OUTBOUND_ALLOWLIST-127.0.0.1:$ORDERS_PORT}"
PORT="${PORT:-8000}"
FLOWER_PORT="${FLOWER_PORT:-5555}"
if (( flower )); then
  # The monitoring page links to it.
  export AGENTRY_FLOWER_URL="${AGENTRY_FLOWER_URL:-http://127.0.0.1:$FLOWER_PORT}"
fi
PY=.venv/bin/python
mkdir -p var/logs
# Every exit and restart of a process below (supervise, scripts/lib.sh).
export SUPERVISOR_LOG=var/logs/supervisor.log
: >"$SUPERVISOR_LOG"

$PY manage.py migrate --noinput -v0
$PY manage.py collectstatic --noinput -v0
$PY manage.py agentry_ensure_admin --dev-default
# Seeding creates only what is missing: a restart never undoes an operator's edit to a demo agent.
if (( reset_demo )); then
  $PY manage.py agentry_seed_demo --reset --dev-default
else
  $PY manage.py agentry_seed_demo --dev-default
fi

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

supervise "fake LLM" var/logs/fakellm.log $PY -m fakellm --host 127.0.0.1 --port "$DEMO_LLM_PORT"
supervise "demo order service" var/logs/orders.log $PY -m demo.orders --port "$ORDERS_PORT"
# The worker command as platform_site/worker_command.py spells it for Python callers; keep them alike.
supervise worker var/logs/worker.log .venv/bin/celery -A platform_site worker -P threads -c 8 -Q llm,maintenance -l info
supervise beat var/logs/beat.log .venv/bin/celery -A platform_site beat -l info
supervise web var/logs/web.log .venv/bin/uvicorn platform_site.asgi:application --host 127.0.0.1 --port "$PORT"
if (( flower )); then
  # Flower can revoke tasks and shut workers down: loopback only, and a login.
  supervise Flower var/logs/flower.log .venv/bin/celery -A platform_site flower --address=127.0.0.1 \
    --port="$FLOWER_PORT" \
    --basic-auth="${FLOWER_BASIC_AUTH:-${AGENTRY_ADMIN_USERNAME:-admin}:${AGENTRY_ADMIN_PASSWORD:-admin}}"
fi

for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$PORT/health/" >/dev/null 2>&1 && break
  sleep 0.2
done
until grep -q " ready." var/logs/worker.log 2>/dev/null; do sleep 0.2; done
if (( flower )); then
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$FLOWER_PORT/healthcheck" >/dev/null 2>&1 && break
    sleep 0.2
  done
fi

cat <<INFO

Agentry is up (embedded defaults: SQLite in var/, filesystem broker, fake LLM on :$DEMO_LLM_PORT,
demo order service on :$ORDERS_PORT; every process restarted if it exits: docs/embedded.md).
  Admin:     http://127.0.0.1:$PORT/admin/   user ${AGENTRY_ADMIN_USERNAME:-admin} / password ${AGENTRY_ADMIN_PASSWORD:-admin}
  Research:  user researcher / password ${AGENTRY_DEMO_RESEARCHER_PASSWORD:-researcher}   (a builder in the demo's second
             workspace; switch workspace with the menu in the page header: docs/workspaces.md)
  API docs:  http://127.0.0.1:$PORT/api/docs/
  Monitor:   http://127.0.0.1:$PORT/monitor/
  Demo:      .venv/bin/python manage.py agentry_demo      (seed 000's conversations, through the queue)
             .venv/bin/python manage.py agentry_demo --customer-service   (seed 001's agents as tools)
             .venv/bin/python manage.py agentry_demo --memory   (one end user remembered across conversations)
  One-off:   PORT=$PORT .venv/bin/python manage.py agentry_chat "我在成都，明天天气如何？"
  Reset:     bash scripts/dev.sh --reset-demo   (the demo agents back to the shipped configuration)
  Logs:      var/logs/   (supervisor.log: every exit and restart)
INFO
if (( flower )); then
  echo "  Flower:    $AGENTRY_FLOWER_URL   (user and password: FLOWER_BASIC_AUTH, else the admin's)"
fi

if (( demo )); then
  # A demo that fails says why and leaves the stack up to look at.
  $PY manage.py agentry_demo || echo "agentry_demo exited with status $?" >&2
  cs_flags=(--customer-service --order-service-port "$ORDERS_PORT")
  (( reset_demo )) && cs_flags+=(--reset)
  $PY manage.py agentry_demo "${cs_flags[@]}" || echo "agentry_demo --customer-service exited with status $?" >&2
  memory_flags=(--memory)
  (( reset_demo )) && memory_flags+=(--reset)
  $PY manage.py agentry_demo "${memory_flags[@]}" || echo "agentry_demo --memory exited with status $?" >&2
fi
wait
