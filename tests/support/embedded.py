"""The embedded stack's var directory (SQLite, the filesystem broker) for tests that run its
commands in child processes: migrated once per session, copied for each test. A migration of a
new SQLite file takes about 20 s of CPU on a loaded 2-core machine; a copy, milliseconds."""

import os
import shutil
import subprocess
import sys
import tempfile
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


class BackgroundMigration:
    """`manage.py migrate` of a new var directory, started as the session starts (tests/conftest.py)
    and waited for by the first test that needs it. The e2e tier mostly waits on its worker,
    servers and browser (its processes, those included, used 255 s of CPU in its 409 s on the
    2-core machine), so the migration's CPU runs beside the tests before the two that need it,
    which come last, instead of in front of them."""

    def __init__(self):
        self.var_dir = Path(tempfile.mkdtemp(prefix="agentry-embedded-"))
        self.log = self.var_dir.with_suffix(".log")
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "migrate", "-v0"],
                cwd=ROOT,
                env=embedded_environment(self.var_dir),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def migrated(self) -> Path:
        """The var directory, as `manage.py migrate` leaves a new one, once it has."""
        assert self.process.wait(timeout=300) == 0, self.log.read_text()
        return self.var_dir

    def discard(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.var_dir, ignore_errors=True)
        self.log.unlink(missing_ok=True)


def var_dir_copy(template: Path, destination: Path) -> Path:
    shutil.copytree(template, destination)
    return destination
