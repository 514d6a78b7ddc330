"""Time the monitoring dashboard's endpoints on the current database (seed it first with
scripts/seed_ledger.py), through the whole Django stack in-process (middleware, session auth,
view, template, queries).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentry_bench REDIS_URL=redis://127.0.0.1:6379/7 \\
        .venv/bin/python scripts/bench_monitoring.py

Prints: the ledger's size; each endpoint's time with the broker probes cached (what a
refreshing page costs) and once uncached; the periodic rollup refresh; and, for comparison,
the same latency and usage figures computed straight from the ledger (what the rollups save).
"""

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Permission  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from console.monitoring.selectors import model_latency  # noqa: E402
from conversations.monitoring.rollups import floor_hour, rollups_refresh  # noqa: E402

EXACT_LATENCY_SQL = """
SELECT m.name, count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms)
FROM conversations_llmcall c JOIN agents_modelconfig m ON m.id = c.model_config_id
WHERE c.started_at >= date_trunc('hour', now()) - interval '23 hours' AND c.status = 'succeeded'
GROUP BY m.name ORDER BY m.name
"""
DIRECT_USAGE_SQL = """
SELECT r.agent_id, date_trunc('day', c.started_at), sum(c.total_tokens), sum(c.cost)
FROM conversations_llmcall c JOIN conversations_run r ON r.id = c.run_id
WHERE c.started_at >= date_trunc('day', now()) - interval '6 days'
GROUP BY 1, 2
"""


def _time(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _summary(times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered):7.1f} ms   p95 {p95:7.1f} ms   max {ordered[-1]:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM conversations_llmcall")
        calls = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM conversations_run")
        runs = cursor.fetchone()[0]
    print(f"ledger: {calls:,} model calls, {runs:,} runs ({connection.vendor})")

    # The dashboard is for staff who may view runs (console.monitoring): an operator with that
    # permission, not a superuser, so the timing includes the permission checks a real one passes.
    user, _ = get_user_model().objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    user.user_permissions.add(Permission.objects.get(content_type__app_label="conversations", codename="view_run"))
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)

    def get(url):
        def fetch():
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return fetch

    refresh = _time(lambda: rollups_refresh(), 5)
    print(f"periodic rollup refresh (beat, every 30 s)        {_summary(refresh)}")

    get("/monitor/data.json")()  # warm the broker probes' cache and the connection
    for name, url in [
        ("data endpoint  /monitor/data.json", "/monitor/data.json"),
        ("data endpoint, 168 h + 31 days", "/monitor/data.json?hours=168&days=31"),
        ("panel (HTML)   /monitor/panel/", "/monitor/panel/"),
        ("page           /monitor/", "/monitor/"),
    ]:
        print(f"{name:<50}{_summary(_time(get(url), args.repeat))}")

    def cold():
        cache.clear()
        get("/monitor/data.json")()

    print(f"{'data endpoint, broker probes uncached':<50}{_summary(_time(cold, 3))}")

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            exact = _time(lambda: cursor.execute(EXACT_LATENCY_SQL), 3)
            rows = cursor.fetchall()
            usage = _time(lambda: cursor.execute(DIRECT_USAGE_SQL), 3)
        print(f"{'for comparison, straight from the ledger:':<50}")
        print(f"{'  exact p50/p95 per model, last 24 h':<50}{_summary(exact)}")
        print(f"{'  tokens/cost per agent per day, 7 days':<50}{_summary(usage)}")
        approx = {row["name"]: row for row in model_latency(start=floor_hour(timezone.now()) - timedelta(hours=23))}
        print("p50 / p95 per model, last 24 h: rollup histogram vs exact")
        for name, count, p50, p95 in rows:
            row = approx.get(name, {})
            print(
                f"  {name:<16} {count:>7} calls   {row.get('p50_ms')} / {row.get('p95_ms')} ms"
                f"   vs   {p50:.0f} / {p95:.0f} ms"
            )


if __name__ == "__main__":
    main()
