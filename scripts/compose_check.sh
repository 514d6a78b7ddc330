#!/usr/bin/env bash
# docker-compose.yml renders with the variables it requires, and refuses to without them; so does
# it with docker-compose.rabbitmq.yml on top (RabbitMQ as the broker). Throwaway values, and an
# empty env file so a developer's .env plays no part.
set -euo pipefail
cd "$(dirname "$0")/.."
if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
empty_env="$(mktemp)"
trap 'rm -f "$empty_env"' EXIT
required=(SECRET_KEY=ci-only-secret-key-0123456789-0123456789-0123456789
  AGENTRY_ENCRYPTION_KEYS=Y2ktb25seS1mZXJuZXQta2V5LTAxMjM0NTY3ODkwMTI= POSTGRES_PASSWORD=ci-only
  AGENTRY_ADMIN_PASSWORD=ci-only FLOWER_BASIC_AUTH=ci:ci-only)

render() {  # render VARIABLES... -- COMPOSE FILES...
  local variables=() files=()
  while [[ "$1" != "--" ]]; do variables+=("$1"); shift; done
  shift
  for file in "$@"; do files+=(-f "$file"); done
  env -i PATH="$PATH" HOME="$HOME" "${variables[@]}" "${compose[@]}" --env-file "$empty_env" "${files[@]}" config --quiet
}

if render -- docker-compose.yml >/dev/null 2>&1; then
  echo "docker-compose.yml rendered without its required secrets" >&2
  exit 1
fi
render "${required[@]}" -- docker-compose.yml
echo "docker-compose.yml: config ok"

if render "${required[@]}" -- docker-compose.yml docker-compose.rabbitmq.yml >/dev/null 2>&1; then
  echo "docker-compose.rabbitmq.yml rendered without RABBITMQ_PASSWORD" >&2
  exit 1
fi
render "${required[@]}" RABBITMQ_PASSWORD=ci-only -- docker-compose.yml docker-compose.rabbitmq.yml
echo "docker-compose.yml + docker-compose.rabbitmq.yml: config ok"
