#!/usr/bin/env bash
# Runs the whole test suite against the real PostgreSQL and Redis on this machine. The suite's
# configuration is platform_site/settings_test.py (pytest.ini); TEST_DATABASE_URL and
# TEST_REDIS_URL point it at other servers.
# Usage: bash scripts/test.sh                        the whole suite as three runs (unit, database,
#                                                    e2e), each tier's count and time printed
#        bash scripts/test.sh --tiers [pytest args]  the same, each tier with these pytest args too
#        bash scripts/test.sh PYTEST_ARGS...         one pytest run (a file, a folder, -k ...)
# The tiers are described in docs/testing.md; `bash scripts/test.sh tests/unit` is the one to run
# while editing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_venv requirements-dev.txt
ensure_services
if (($#)) && [[ "$1" != "--tiers" ]]; then
  exec .venv/bin/python -m pytest "$@"
fi
if (($#)); then
  shift
fi

E2E="e2e or browser or fuzz"
# name, then its pytest arguments. The database tier creates the test database afresh and keeps
# it (--create-db --reuse-db), so the e2e tier reuses it instead of migrating a new one; the unit
# tier opens no database at all.
TIERS=(
  "unit|tests/unit"
  "database|tests --ignore=tests/unit -m 'not ($E2E)' --create-db --reuse-db"
  "e2e|tests --ignore=tests/unit -m '$E2E' --reuse-db"
)
declare -A total=()
failed_tiers=()
for tier in "${TIERS[@]}"; do
  name="${tier%%|*}"
  eval "args=(${tier#*|})"
  log="$(mktemp)"
  started=$SECONDS
  status=0
  .venv/bin/python -m pytest "${args[@]}" "$@" 2>&1 | tee "$log" || status=${PIPESTATUS[0]}
  elapsed=$((SECONDS - started))
  # pytest's last line: "==== 12 passed, 1 skipped, 2 deselected in 3.45s ====" (or -q's bare form).
  summary="$(grep -E '^=* ?[0-9]+ [a-z]+.* in [0-9.]+s' "$log" | tail -1 | sed -E 's/^=+ //; s/ =+$//; s/ in [0-9.]+s.*//')"
  rm -f "$log"
  while read -r count word; do
    if [[ -n "$word" ]]; then
      total[$word]=$((${total[$word]:-0} + count))
    fi
  done < <(tr ',' '\n' <<<"$summary" | sed -E 's/^ +//')
  echo "tier $name: ${summary:-no summary} in $elapsed s"
  # 5: no test selected (a tier that is empty for these arguments) is not a failure.
  if ((status != 0 && status != 5)); then
    failed_tiers+=("$name")
  fi
done
line="${total[passed]:-0} passed, ${total[failed]:-0} failed"
for word in error errors skipped xfailed xpassed; do
  if [[ -n "${total[$word]:-}" ]]; then
    line+=", ${total[$word]} $word"
  fi
done
# The last line reads as pytest's does, for whatever reads the end of the log.
if ((${#failed_tiers[@]})); then
  # A tier can fail with no test failed (a collection error, an internal error): say so last too.
  echo "tiers failed: ${failed_tiers[*]}"
  echo "==== $line, ${#failed_tiers[@]} tiers failed in $SECONDS s (all tiers) ===="
  exit 1
fi
echo "==== $line in $SECONDS s (all tiers) ===="
