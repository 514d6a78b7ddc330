"""The embedded stack's var directory (SQLite, the filesystem broker) for tests that run its
commands in child processes: migrated once per session, copied for each test. A migration of a
new SQLite file takes about 20 s of CPU on a loaded 2-core machine; a copy, milliseconds."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def embedded_environment(var_dir: Path) -> dict:
    """The environment of a command on the embedded stack in `var_dir` (the default settings,
    no database or broker URL)."""
    return os.environ | {
        "DATABASE_URL": "",
        "AGENTRY_VAR_DIR": str(var_dir),
        "DJANGO_SETTINGS_MODULE": "platform_site.settings",
    }


def manage(*arguments: str, var_dir: Path) -> str:
    """`manage.py ARGUMENTS` on the embedded stack in `var_dir`; its output, once it succeeded."""
    done = subprocess.run(
        [sys.executable, "manage.py", *arguments],
        cwd=ROOT,
        env=embedded_environment(var_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def migrated_var_dir(var_dir: Path) -> Path:
    """A var directory whose SQLite database is migrated, as `manage.py migrate` leaves a new one."""
    manage("migrate", "-v0", var_dir=var_dir)
    return var_dir


def var_dir_copy(template: Path, destination: Path) -> Path:
    shutil.copytree(template, destination)
    return destination
