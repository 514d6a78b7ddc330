"""A PgBouncer in transaction mode before the suite's PostgreSQL, for the tests of what
docs/deployment.md says works through it. Its server connections are handed out in turn
(`server_round_robin`) and two are open, so two statements of one client land on two servers,
as on a busy pool: anything kept on a connection between statements (a held cursor) is lost."""

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.support.waits import wait_for

PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pgbouncer_url():
    """Start PgBouncer (skip the test where it is not installed) and yield the test database's URL through it."""
    if PGBOUNCER is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    s = connection.settings_dict
    port = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="agentry-pgbouncer-"))
    folder.chmod(0o777)  # PgBouncer will not run as root: it drops to `nobody`, which reads and logs here
    (folder / "users.txt").write_text(f'"{s["USER"]}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={s["HOST"] or "127.0.0.1"} port={s["PORT"] or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = transaction
; Each transaction gets the server connection idle the longest: with two servers, a client's
; consecutive statements alternate between them.
server_round_robin = 1
default_pool_size = 2
ignore_startup_parameters = extra_float_digits,options
logfile = {folder / "pgbouncer.log"}
"""
    )
    for name in ("users.txt", "pgbouncer.ini"):
        (folder / name).chmod(0o644)
    user = ["-u", "nobody"] if os.geteuid() == 0 else []
    process = subprocess.Popen([PGBOUNCER, *user, str(folder / "pgbouncer.ini")], stderr=subprocess.PIPE)
    url = f"postgres://{s['USER']}@127.0.0.1:{port}/{s['NAME']}"

    def answers():
        try:
            with psycopg.connect(url, autocommit=True, prepare_threshold=None) as probe:
                return probe.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    try:
        wait_for(answers, timeout=20, message="pgbouncer to answer")
        # Two clients in a transaction at once: the pool opens both its server connections.
        first, second = (psycopg.connect(url, prepare_threshold=None) for _ in range(2))
        with first, second:
            first.execute("SELECT 1")
            second.execute("SELECT 1")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
