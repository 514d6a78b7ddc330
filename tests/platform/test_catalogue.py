"""The Simplified Chinese catalogues ship complete: every entry translated and none fuzzy, the
compiled .mo files say what the .po files say, and the .po files hold every string the code and
templates mark for translation today. How to update them: docs/languages.md."""

import os
import tempfile
from pathlib import Path

import polib
import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

CATALOGUES = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES"
DOMAINS = ["django", "djangojs"]
# What extraction leaves out (the same list as scripts/messages.sh): the tests, the benchmarks,
# local data, and the catalogues themselves.
NOT_SCANNED = {"locale", "tests", "bench", "var", "test-artifacts", "node_modules"}
HOW_TO_FIX = (
    "run `bash scripts/messages.sh`, translate every empty or fuzzy entry in locale/zh_Hans, "
    "then `bash scripts/messages.sh --compile` (docs/languages.md)"
)


def _catalogue(domain: str) -> polib.POFile:
    return polib.pofile(str(CATALOGUES / f"{domain}.po"))


def _live(po: polib.POFile) -> list[polib.POEntry]:
    return [entry for entry in po if not entry.obsolete]


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_entry_is_translated_and_none_is_fuzzy(domain):
    po = _catalogue(domain)
    assert po.metadata.get("Plural-Forms") == "nplurals=1; plural=0;"
    untranslated = [entry.msgid for entry in po.untranslated_entries()]
    fuzzy = [entry.msgid for entry in po.fuzzy_entries()]
    assert not untranslated, f"untranslated in {domain}.po: {untranslated}; {HOW_TO_FIX}"
    assert not fuzzy, f"fuzzy in {domain}.po: {fuzzy}; {HOW_TO_FIX}"
    assert len(_live(po)) > (200 if domain == "django" else 10)


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_compiled_catalogue_matches_its_source(domain):
    compiled = {(entry.msgid, entry.msgid_plural): entry for entry in polib.mofile(str(CATALOGUES / f"{domain}.mo"))}
    for entry in _live(_catalogue(domain)):
        shipped = compiled.get((entry.msgid, entry.msgid_plural))
        assert shipped is not None, f"{entry.msgid!r} is not in {domain}.mo; {HOW_TO_FIX}"
        if entry.msgid_plural:
            assert shipped.msgstr_plural[0] == entry.msgstr_plural[0], entry.msgid
        else:
            assert shipped.msgstr == entry.msgstr, f"{domain}.mo is older than {domain}.po; {HOW_TO_FIX}"


def _extract(out: Path) -> dict[str, set[str]]:
    """The msgids makemessages finds in the code today, by domain, written under `out`.

    makemessages writes beside the nearest `locale` directory it walks past, so it runs in a
    directory of links to the project's top-level entries without `locale`, and the shipped
    catalogues stay untouched."""
    tree = out / "tree"
    tree.mkdir()
    for entry in Path(settings.BASE_DIR).iterdir():
        if entry.name not in NOT_SCANNED and not entry.name.startswith("."):
            (tree / entry.name).symlink_to(entry)
    found = {}
    cwd = os.getcwd()
    os.chdir(tree)
    try:
        with override_settings(LOCALE_PATHS=[str(tree / "locale")]):
            for domain in DOMAINS:
                call_command(
                    "makemessages", locale=["zh_Hans"], domain=domain, symlinks=True, no_location=True, verbosity=0
                )
                fresh = polib.pofile(str(tree / "locale" / "zh_Hans" / "LC_MESSAGES" / f"{domain}.po"))
                found[domain] = {entry.msgid for entry in fresh}
    finally:
        os.chdir(cwd)
    return found


def test_the_catalogues_hold_every_string_of_the_code():
    with tempfile.TemporaryDirectory() as out:
        found = _extract(Path(out))
    for domain in DOMAINS:
        shipped = {entry.msgid for entry in _live(_catalogue(domain))}
        missing = sorted(found[domain] - shipped)
        assert found[domain], f"nothing extracted for {domain}"
        assert not missing, f"{len(missing)} string(s) missing from {domain}.po: {missing}; {HOW_TO_FIX}"
