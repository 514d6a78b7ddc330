# Shared by scripts/*.sh: a virtualenv with pinned requirements, and the local services.

ensure_venv() {
  local requirements="$1"
  if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
  fi
  # Reinstall only when the requirements changed since the last install.
  local stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$requirements"
  if [[ ! -f "$stamp" ]]; then
    .venv/bin/pip install --quiet -r "$requirements"
    touch "$stamp"
  fi
}

postgres_ready() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_ready() { redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; }

# wait_for NAME CHECK SECONDS: poll CHECK every second; fail loudly if it never passes.
wait_for() {
  local name="$1" check="$2" seconds="$3"
  for _ in $(seq 1 "$seconds"); do "$check" && return 0; sleep 1; done
  echo "$name is not accepting connections after ${seconds} s" >&2
  return 1
}

ensure_services() {
  if ! postgres_ready; then
    echo "starting PostgreSQL"
    # A cluster that is still starting or recovering (a machine that has just booted) does not
    # accept connections yet, and pg_ctlcluster then refuses with "already running" (exit 2).
    # That is not a failure: wait for it like for one started here.
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start ||
      echo "pg_ctlcluster exited $?; waiting for the running cluster"
    wait_for PostgreSQL postgres_ready 120
  fi
  if ! redis_ready; then
    echo "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no ||
      echo "redis-server exited $?; waiting for the running server"
    wait_for Redis redis_ready 60
  fi
}
