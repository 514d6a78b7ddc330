#!/usr/bin/env bash
# The Simplified Chinese catalogues in locale/zh_Hans (docs/languages.md).
#   bash scripts/messages.sh            update the .po files from the code: new strings arrive
#                                       with an empty msgstr, changed ones marked fuzzy
#   bash scripts/messages.sh --compile  compile the .po files into the .mo files the site reads
# Translate in between (fill every empty msgstr, remove every "#, fuzzy" line); the catalogue
# test (tests/platform/test_catalogue.py) fails until both are done. Needs GNU gettext.
set -euo pipefail
cd "$(dirname "$0")/.."
# makemessages imports the settings; a throwaway embedded database keeps it off any real one.
export DATABASE_URL= AGENTRY_VAR_DIR="${AGENTRY_VAR_DIR:-$(mktemp -d)}"
PY=.venv/bin/python
if [[ "${1:-}" == "--compile" ]]; then
  exec $PY manage.py compilemessages -l zh_Hans --ignore=.venv --ignore=var --ignore=test-artifacts
fi
# The same options as the catalogue test's extraction (tests/platform/test_catalogue.py).
for domain in django djangojs; do
  $PY manage.py makemessages -d "$domain" -l zh_Hans --no-location --no-obsolete \
    --ignore=.venv --ignore=tests --ignore=bench --ignore=var --ignore=test-artifacts --ignore=node_modules
done
