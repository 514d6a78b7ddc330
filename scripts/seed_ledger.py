"""Seed a large ledger for the monitoring benchmark: N model calls (default one million) over
N/4 runs, spread over the last days, in a few INSERT … SELECT generate_series statements.

PostgreSQL only. Use a database of its own; the rows are not cleaned up.

    createdb -h 127.0.0.1 -U postgres agentry_bench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentry_bench .venv/bin/python scripts/seed_ledger.py
"""

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from agents.models import Agent, ModelConfig  # noqa: E402
from agents.services import agent_version_current  # noqa: E402
from conversations.monitoring.rollups import rollups_refresh  # noqa: E402

CALLS_PER_RUN = 4

SEED_SQL = """
WITH spec AS (
    SELECT i,
           (%(agents)s::bigint[])[1 + i %% %(n_agents)s] AS agent_id,
           (%(versions)s::bigint[])[1 + i %% %(n_agents)s] AS version_id,
           now() - random() * make_interval(days => %(days)s) AS ts,
           random() AS fate
    FROM generate_series(1, %(runs)s) AS i
), conversations AS (
    INSERT INTO conversations_conversation (id, agent_id, title, metadata, message_count, created_at)
    SELECT md5('c' || %(salt)s || i)::uuid, agent_id, '', '{}', 0, ts FROM spec
), runs AS (
    INSERT INTO conversations_run (
        id, conversation_id, agent_id, agent_version_id, status, stop_reason, error, cancel_requested, iterations,
        prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, total_tokens, cost, lease_owner,
        claims, recoveries, event_seq, created_at, started_at, finished_at)
    SELECT md5('r' || %(salt)s || i)::uuid, md5('c' || %(salt)s || i)::uuid, agent_id, version_id,
           CASE WHEN fate < 0.05 THEN 'failed' WHEN fate < 0.07 THEN 'cancelled' ELSE 'completed' END,
           CASE WHEN fate < 0.03 THEN 'provider_error' WHEN fate < 0.05 THEN 'internal_error'
                WHEN fate < 0.07 THEN 'cancelled' WHEN fate < 0.09 THEN 'max_iterations' ELSE 'final_answer' END,
           CASE WHEN fate < 0.03 THEN 'The model could not be reached: HTTP 503: overloaded'
                WHEN fate < 0.05 THEN E'Traceback (most recent call last):\\n  File "x"\\nKeyError: ''city'''
                ELSE '' END,
           false, %(calls_per_run)s, 0, 0, 0, 0, 0, 0, '', 1, 0, 0, ts, ts, ts + interval '8 seconds'
    FROM spec
    RETURNING id, agent_id, started_at
), calls AS (
    -- random() in a select list is drawn for every row (in a LATERAL it may be memoized).
    SELECT r.id AS run_id, r.started_at, k, a.model_config_id, random() < 0.02 AS fail,
           800 + (random() * 1200)::int AS prompt, 20 + (random() * 300)::int AS completion,
           -- Roughly log-normal latency around a per-model median (300 ms, 600 ms, 1.2 s, 2.4 s).
           (300 * power(2, a.model_config_id %% 4) * exp((random() + random() + random() - 1.5) * 0.8))::int
               AS latency
    FROM runs r
    JOIN agents_agent a ON a.id = r.agent_id
    CROSS JOIN generate_series(1, %(calls_per_run)s) AS k
)
INSERT INTO conversations_llmcall (
    run_id, iteration, attempt, purpose, model_config_id, provider, model_name, request, status, http_status,
    finish_reason, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, total_tokens,
    usage_estimated, cost, latency_ms, error, started_at, finished_at)
SELECT run_id, k, 1, 'step', model_config_id, 'openai_compatible', 'bench', '{"messages": []}'::jsonb,
       CASE WHEN fail THEN 'failed' ELSE 'succeeded' END, CASE WHEN fail THEN 503 ELSE 200 END,
       CASE WHEN fail THEN '' WHEN k = %(calls_per_run)s THEN 'stop' ELSE 'tool_calls' END,
       prompt, completion, prompt / 4, 0, prompt + completion, false,
       (prompt * 0.15 + completion * 1.5) / 1000000, latency,
       CASE WHEN fail THEN 'HTTP 503: overloaded' ELSE '' END,
       started_at + (k - 1) * interval '2 seconds',
       started_at + (k - 1) * interval '2 seconds' + latency * interval '1 millisecond'
FROM calls
"""


def _bench_agents(count: int) -> tuple[list[int], list[int]]:
    agents, versions = [], []
    for n in range(1, count + 1):
        model, _ = ModelConfig.objects.get_or_create(
            name=f"bench-model-{n}", defaults={"base_url": "http://127.0.0.1:9/v1", "model": f"bench-{n}"}
        )
        agent, _ = Agent.objects.get_or_create(
            slug=f"bench-agent-{n}", defaults={"name": f"Bench agent {n}", "model_config": model}
        )
        agents.append(agent.pk)
        versions.append(agent_version_current(agent=agent).pk)
    return agents, versions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000, help="model-call rows to add (default 1,000,000)")
    parser.add_argument("--days", type=int, default=14, help="spread them over this many past days")
    parser.add_argument("--agents", type=int, default=4)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("seed_ledger.py needs PostgreSQL: set DATABASE_URL")

    call_command("migrate", verbosity=0)
    agents, versions = _bench_agents(args.agents)
    runs = args.calls // CALLS_PER_RUN
    params = {
        "agents": agents,
        "versions": versions,
        "n_agents": len(agents),
        "days": args.days,
        "runs": runs,
        "salt": str(time.time_ns()),
        "calls_per_run": CALLS_PER_RUN,
    }
    started = time.monotonic()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(SEED_SQL, params)
        calls = cursor.rowcount
    seeded = time.monotonic() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE conversations_run; ANALYZE conversations_llmcall;")
        cursor.execute("SELECT count(*) FROM conversations_llmcall")
        total = cursor.fetchone()[0]
    print(f"seeded {runs:,} runs and {calls:,} model calls in {seeded:.1f} s (ledger now holds {total:,} calls)")

    started = time.monotonic()
    summary = rollups_refresh(since=timezone.now() - timedelta(days=args.days + 1))
    print(f"rollups rebuilt from scratch in {time.monotonic() - started:.1f} s: {summary}")


if __name__ == "__main__":
    main()
