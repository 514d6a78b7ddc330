"""Seed a large ledger for the monitoring benchmark: N model calls (default one million) over
N/4 runs, spread over the last days, with bench.scale_ledger's set-based generator (each run's
conversation, model calls, tool calls and events).

PostgreSQL only. Use a database of its own; the rows are not cleaned up.

    createdb -h 127.0.0.1 -U postgres agentry_bench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentry_bench .venv/bin/python scripts/seed_ledger.py
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.scale_ledger import CALLS_PER_RUN, ledger_add  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000, help="model-call rows to add (default 1,000,000)")
    parser.add_argument("--days", type=int, default=14, help="spread them over this many past days")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("seed_ledger.py needs PostgreSQL: set DATABASE_URL")

    call_command("migrate", verbosity=0)
    runs = args.calls // CALLS_PER_RUN
    started = time.monotonic()
    ledger_add(runs, days=args.days)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM conversations_llmcall")
        total = cursor.fetchone()[0]
    print(
        f"seeded {runs:,} runs and {runs * CALLS_PER_RUN:,} model calls, rollups rebuilt, in "
        f"{time.monotonic() - started:.1f} s (ledger now holds {total:,} calls)"
    )


if __name__ == "__main__":
    main()
