# Shared by scripts/*.sh: a virtualenv with pinned requirements, and the local services.

ensure_venv() {
  local requirements="$1"
  if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
  fi
  # Reinstall only when the requirements changed since the last install.
  local stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$requirements"
  if [[ ! -f "$stamp" ]]; then
    # pip's own lines (each package as it is collected and installed) are the progress.
    echo "installing $requirements into .venv (the first start takes a few minutes; later ones skip this)"
    .venv/bin/pip install -r "$requirements"
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

# supervise NAME LOG COMMAND...: runs COMMAND in the background with its output in LOG and its
# supervisor's id appended to the caller's `pids` array. Whenever COMMAND exits, says so on
# stderr (with the log's last lines), appends a line to $SUPERVISOR_LOG and starts it again: a
# worker that dies must not leave runs queued with nothing on the screen. One that keeps dying
# within 10 s of its start is retried less and less often, up to every 30 s. TERM to the
# supervisor stops COMMAND and the supervisor.
supervise() {
  local name="$1" log="$2"
  shift 2
  : >"$log"
  (
    child=""
    trap '[[ -n "$child" ]] && kill "$child" 2>/dev/null; wait; exit 0' TERM
    delay=1
    while :; do
      started=$SECONDS
      "$@" >>"$log" 2>&1 &
      child=$!
      status=0
      wait "$child" || status=$?
      child=""
      # Ctrl-C reaches the processes too: give the stop a moment to arrive before reporting.
      sleep 0.5 & wait $!
      lived=$((SECONDS - started))
      ((lived >= 10)) && delay=1
      echo "$(date -u +%FT%TZ) $name exited with status $status after ${lived} s; restarting in ${delay} s" \
        >>"${SUPERVISOR_LOG:-/dev/null}"
      {
        [[ -t 2 ]] && printf '\033[1;31m'
        printf '\n!!! %s exited with status %s after %s s; restarting it in %s s. Last lines of %s:\n' \
          "$name" "$status" "$lived" "$delay" "$log"
        [[ -t 2 ]] && printf '\033[0m'
        tail -n 8 "$log" | sed 's/^/    /'
      } >&2
      echo "--- restarted after exit status $status ---" >>"$log"
      sleep "$delay" & wait $!
      ((lived < 10)) && delay=$((delay * 2 > 30 ? 30 : delay * 2))
    done
  ) &
  pids+=($!)
}
