"""The export through PgBouncer in transaction mode, as docs/deployment.md recommends for hosts
with many processes: `manage.py agentry_export` run with DATABASE_URL at a PgBouncer pool whose
server connections are handed out in turn, so two statements of one client land on two servers
(what a busy pool does). An export that kept a cursor between statements fails there with
"cursor … does not exist"; the export reads keyset pages and writes every run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conversations.models import Run
from tests.support.factories import make_agent
from tests.support.ledger_seed import ROWS_PER_RUN, ledger_seed
from tests.support.pgbouncer import pgbouncer_url

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def pgbouncer():
    yield from pgbouncer_url()


def test_the_export_works_through_pgbouncer_in_transaction_mode(pgbouncer, tmp_path):
    agent = make_agent(slug="pooled")
    runs = ledger_seed(agent, 450)  # three pages of 200
    output = tmp_path / "runs.jsonl"
    env = {
        **os.environ,
        "DATABASE_URL": pgbouncer,
        # PgBouncer before 1.21 keeps no prepared statement across server connections.
        "AGENTRY_DB_PREPARE": "0",
        "AGENTRY_VAR_DIR": str(tmp_path / "var"),
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "agentry_export", "--format", "jsonl", "--output", str(output)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    expected = Run.objects.filter(pk__in=[r.pk for r in runs]).order_by("created_at", "id")
    assert [line["id"] for line in lines] == [str(pk) for pk in expected.values_list("pk", flat=True)]
    assert all(len(line["llm_calls"]) == ROWS_PER_RUN["llm_calls"] for line in lines)
