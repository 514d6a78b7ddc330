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

ensure_services() {
  if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    echo "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
    for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
  fi
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
    for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done
  fi
}
