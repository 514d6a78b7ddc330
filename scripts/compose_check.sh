#!/usr/bin/env bash
# docker-compose.yml renders with the variables it requires, and refuses to without them.
# Throwaway values, and an empty env file so a developer's .env plays no part.
set -euo pipefail
cd "$(dirname "$0")/.."
if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
empty_env="$(mktemp)"
trap 'rm -f "$empty_env"' EXIT
if env -i PATH="$PATH" HOME="$HOME" "${compose[@]}" --env-file "$empty_env" -f docker-compose.yml config >/dev/null 2>&1; then
  echo "docker-compose.yml rendered without its required secrets" >&2
  exit 1
fi
env -i PATH="$PATH" HOME="$HOME" SECRET_KEY=ci-only-secret-key-0123456789-0123456789-0123456789 \
  AGENTRY_ENCRYPTION_KEYS=Y2ktb25seS1mZXJuZXQta2V5LTAxMjM0NTY3ODkwMTI= POSTGRES_PASSWORD=ci-only \
  AGENTRY_ADMIN_PASSWORD=ci-only FLOWER_BASIC_AUTH=ci:ci-only \
  "${compose[@]}" --env-file "$empty_env" -f docker-compose.yml config --quiet
echo "docker-compose.yml: config ok"
