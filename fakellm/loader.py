"""Loading script documents from disk."""

from __future__ import annotations

import json
from pathlib import Path

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"


def load_script_file(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def load_default_scripts() -> dict[str, dict]:
    """Every shipped scripts/*.json, named after its file stem."""
    return {path.stem: load_script_file(path) for path in sorted(SCRIPTS_DIR.glob("*.json"))}


def parse_script_option(option: str) -> tuple[str, dict]:
    """Parse a NAME=PATH command-line option into (name, document)."""
    name, sep, path = option.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"expected NAME=PATH, got {option!r}")
    return name, load_script_file(path)
