"""The ledger-size axis of bench.scale: what reading and ageing the ledger cost as it grows.

    DATABASE_URL=postgres://… REDIS_URL=redis://… python -m bench.scale_ledger [--sizes 1000000,5000000]
        [--reads-only]

A ledger of N model calls (4 per run: three that ask for a tool, one that answers), with each
run's conversation, its three tool invocations and three events, spread over the past year. It
is written with set-based SQL (one INSERT … SELECT generate_series per chunk of runs, payloads a
few bytes) and kept: the next size only adds the calls missing, so a database holding 5 million
grows to 10 million by adding 5. Use a database of its own; nothing is cleaned up.

Per size, through the Django stack in this process:
- the monitoring dashboard's data (GET /monitor/data.json, what the page polls), median;
- the runs list API (GET /api/v1/runs/, first page and filtered by status, with a token), p95;
- one run's timeline (GET /monitor/runs/<id>/timeline.json), median over runs picked at random;
- the operator's pages (page_reads), as a superuser: the first bench agent's page, its playground,
  a conversation's thread and the admin's runs list unfiltered and by each filter, median and p95
  of 20 after a first GET that counts the page's statements; a route or filter the code base
  does not have is printed "not available";
- export runs per second (the JSONL export of one day's runs, read to the end);
- retention: the oldest week (--retention-days) purged by conversations.retention.runs_purge as the daily sweep
  does (committed, a batch per transaction), rows deleted per second, while another thread
  advances 3-step runs as bench.step_cost does; their median wall time against the same runs
  advanced just before without retention is the slowdown ratio. Twice: without the rest between
  batches (pause 0), then with the default (AGENTRY_RETENTION_PAUSE); after each, the purged days
  are written again (as many runs, spread over the same days), so the ledger keeps its size.

`--reads-only` measures the reads (the first four and the pages) against the ledger present:
nothing is added, exported or purged.
"""

import argparse
import math
import os
import statistics
import sys
import threading
import time
from datetime import timedelta
from urllib.parse import urlencode, urlsplit

from bench.tables import COLUMNS, markdown_table

CALLS_PER_RUN = 4
SPAN_DAYS = 365
# Retention purges the oldest week of the ledger, twice a point. The slowdown of live runs is a
# ratio of the purge's duty cycle, not of its length, and a month at 10 million calls takes 6
# minutes without rest and 20 with it (`--retention-days 30` measures it).
RETENTION_PURGED_DAYS = 7
# Runs written per statement: one transaction of ~1 million call rows and their neighbours.
CHUNK_RUNS = 250_000
AGENTS = 4
REPEAT = 20
LIVE_RUNS = 20

GROW_SQL = """
WITH spec AS (
    SELECT i,
           (%(agents)s::bigint[])[1 + i %% %(n_agents)s] AS agent_id,
           (%(versions)s::bigint[])[1 + i %% %(n_agents)s] AS version_id,
           now() - make_interval(days => %(before_days)s) - random() * make_interval(days => %(days)s) AS ts,
           random() AS fate
    FROM generate_series(1, %(runs)s) AS i
), conversations AS (
    INSERT INTO conversations_conversation (
        id, agent_id, title, metadata, message_count, end_user, context_summary, context_summary_through,
        created_at)
    SELECT md5('c' || %(salt)s || i)::uuid, agent_id, '', '{}', 0, '', '', 0, ts FROM spec
), runs AS (
    INSERT INTO conversations_run (
        id, conversation_id, agent_id, agent_version_id, status, stop_reason, error, cancel_requested, iterations,
        prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, total_tokens, usage_estimated, cost,
        lease_owner, claims, recoveries, event_seq, trace_id, trace_parent_span_id, trace_span_id, children_cost,
        children_tokens, depth, trigger, created_at, started_at, finished_at, tags, metadata)
    SELECT md5('r' || %(salt)s || i)::uuid, md5('c' || %(salt)s || i)::uuid, agent_id, version_id,
           CASE WHEN fate < 0.05 THEN 'failed' WHEN fate < 0.07 THEN 'cancelled' ELSE 'completed' END,
           CASE WHEN fate < 0.05 THEN 'provider_error' WHEN fate < 0.07 THEN 'cancelled' ELSE 'final_answer' END,
           CASE WHEN fate < 0.05 THEN 'The model could not be reached: HTTP 503' ELSE '' END,
           false, %(calls_per_run)s, 4000, 400, 1000, 0, 4400, false, 0.0012, '', 1, 0, 3, '', '', '', 0, 0, 0,
           'api', ts, ts, ts + interval '8 seconds', '[]', '{}'
    FROM spec
    RETURNING id, agent_id, status, started_at
), calls AS (
    INSERT INTO conversations_llmcall (
        run_id, iteration, attempt, purpose, model_config_id, provider, model_name, request, status, http_status,
        finish_reason, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, total_tokens,
        image_tokens, audio_tokens, cache_write_tokens, usage_estimated, cost, latency_ms, error, copied, started_at,
        finished_at)
    SELECT r.id, k, 1, 'step', a.model_config_id, 'openai_compatible', 'scale-ledger', '{}'::jsonb, 'succeeded',
           200, CASE WHEN k = %(calls_per_run)s THEN 'stop' ELSE 'tool_calls' END, 1000, 100, 250, 0, 1100, 0, 0, 0,
           false, 0.0003, 300 + (random() * 900)::int, '', false, r.started_at + (k - 1) * interval '2 seconds',
           r.started_at + (k - 1) * interval '2 seconds' + interval '1 second'
    FROM runs r JOIN agents_agent a ON a.id = r.agent_id CROSS JOIN generate_series(1, %(calls_per_run)s) AS k
    RETURNING id, run_id, iteration, started_at
), tools AS (
    INSERT INTO conversations_toolinvocation (
        run_id, llm_call_id, tool_name, tool_call_id, position, raw_arguments, arguments, validation_errors,
        status, result, truncated, error, idempotency_key, simulated, copied, latency_ms, created_at, started_at,
        finished_at, details)
    SELECT run_id, id, 'get_weather', 'call_' || iteration, 0, '{"city": "成都"}', '{"city": "成都"}', '[]',
           'succeeded', '晴，25°C', false, '', '', false, false, 40, started_at + interval '1 second',
           started_at + interval '1 second', started_at + interval '1040 milliseconds', '{}'
    FROM calls WHERE iteration < %(calls_per_run)s
)
INSERT INTO conversations_runevent (run_id, seq, type, payload, created_at)
SELECT r.id, seq, CASE seq WHEN 1 THEN 'run.queued' WHEN 2 THEN 'run.running' ELSE 'run.' || r.status END, '{}',
       r.started_at + seq * interval '2 seconds'
FROM runs r CROSS JOIN generate_series(1, 3) AS seq
"""


# --- pure helpers --------------------------------------------------------------------------------


def runs_to_add(present_calls: int, size: int) -> int:
    """Whole runs that bring a ledger of `present_calls` model calls up to at least `size` (none
    if it holds as many already: a ledger is grown, never shrunk)."""
    return -(-max(0, size - present_calls) // CALLS_PER_RUN)


def chunks(total: int, chunk: int) -> list[int]:
    """`total` split into pieces of at most `chunk`."""
    return [min(chunk, total - start) for start in range(0, total, chunk)]


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of `values` (p95: fraction 0.95)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def retention_days(span_days: int, purged_days: int) -> int:
    """The retention policy that removes the oldest `purged_days` of a ledger spanning `span_days`."""
    return span_days - purged_days


# --- the ledger ----------------------------------------------------------------------------------


def _calls_present() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM conversations_llmcall")
        return cursor.fetchone()[0]


def _bench_agents() -> tuple[list[int], list[int]]:
    from agents.models import Agent, ModelConfig
    from agents.services import agent_version_current

    agents, versions = [], []
    for n in range(1, AGENTS + 1):
        model, _ = ModelConfig.objects.get_or_create(
            name=f"scale-ledger-{n}", defaults={"base_url": "http://127.0.0.1:9/v1", "model": f"scale-{n}"}
        )
        agent, _ = Agent.objects.get_or_create(
            slug=f"scale-ledger-{n}", defaults={"name": f"Scale ledger {n}", "model_config": model}
        )
        agents.append(agent.pk)
        versions.append(agent_version_current(agent=agent).pk)
    return agents, versions


def ledger_grow(size: int) -> dict:
    """Bring the ledger up to `size` model calls; what it took (seconds, 0 if nothing was added)."""
    added, started = runs_to_add(_calls_present(), size), time.monotonic()
    if added:
        ledger_add(added, days=SPAN_DAYS)
    return {"generate_s": time.monotonic() - started if added else 0.0}


def ledger_add(runs: int, *, days: int, before_days: int = 0) -> None:
    """Add `runs` runs (CALLS_PER_RUN model calls each, with their conversations, tool calls and
    events) spread over `days` ending `before_days` ago, then refresh the planner's statistics
    and rebuild the dashboard's rollups over them (scripts/seed_ledger.py uses it too)."""
    from django.db import connection, transaction

    agents, versions = _bench_agents()
    for chunk in chunks(runs, CHUNK_RUNS):
        params = {
            "agents": agents,
            "versions": versions,
            "n_agents": len(agents),
            "days": days,
            "before_days": before_days,
            "runs": chunk,
            "salt": str(time.time_ns()),
            "calls_per_run": CALLS_PER_RUN,
        }
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(GROW_SQL, params)
    with connection.cursor() as cursor:
        for table in ("conversation", "run", "llmcall", "toolinvocation", "runevent"):
            cursor.execute(f"ANALYZE conversations_{table}")
    _rollups_rebuild(days)


def _rollups_rebuild(days: int) -> None:
    """The dashboard reads hourly rollups that beat keeps; rows written behind its back need a
    rebuild over what the dashboard can show (31 days) or the rows span, the shorter."""
    from django.utils import timezone

    from conversations.monitoring.rollups import rollups_refresh

    rollups_refresh(since=timezone.now() - timedelta(days=min(days, 31) + 1))


# --- reading -------------------------------------------------------------------------------------


def _timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - started))
    return times


def _clients():
    """An operator's session client (the console) and a token client (the API)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from conversations.tokens import api_token_create

    user, _ = get_user_model().objects.get_or_create(
        username="scale-ledger", defaults={"is_staff": True, "is_superuser": True}
    )
    console = Client(HTTP_HOST="localhost")
    console.force_login(user)
    _, token = api_token_create(user=user, name="scale-ledger")
    api = Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {token}")
    return console, api


def _getter(client, url: str):
    def get():
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"GET {url}: {response.status_code}")
        if getattr(response, "streaming", False):
            for _ in response.streaming_content:
                pass

    return get


def _sample_runs(count: int) -> list:
    """Run ids picked at random across the ledger (TABLESAMPLE: no scan of the whole table). A
    small ledger has few pages, and a 1 % sample of them may hold no row: then any `count` runs."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM conversations_run TABLESAMPLE SYSTEM (1) LIMIT %s", [count])
        picked = [row[0] for row in cursor.fetchall()]
        if len(picked) < count:
            cursor.execute("SELECT id FROM conversations_run LIMIT %s", [count])
            picked = [row[0] for row in cursor.fetchall()]
        return picked


def _reads(console, api) -> dict:
    dashboard = _getter(console, "/monitor/data.json")
    dashboard()  # the broker probes' cache and the connection warm
    runs_page, failed_page = _getter(api, "/api/v1/runs/"), _getter(api, "/api/v1/runs/?status=failed")
    runs_page()
    failed_page()
    timelines = [_getter(console, f"/monitor/runs/{run_id}/timeline.json") for run_id in _sample_runs(REPEAT)]
    timeline_ms = [_timed(get, 1)[0] for get in timelines]
    return {
        "dashboard_ms": statistics.median(_timed(dashboard, REPEAT // 2)),
        "runs_list_p95_ms": percentile(_timed(runs_page, REPEAT), 0.95),
        "runs_filtered_p95_ms": percentile(_timed(failed_page, REPEAT), 0.95),
        "timeline_ms": statistics.median(timeline_ms),
    }


# --- the operator's pages ------------------------------------------------------------------------

# Each page read (issue 55: within 300 ms at 10 million model calls), as a superuser sees it: the
# agent's page of the first bench agent and the runs list as operators filter it. A route or a
# filter this code base does not have (yet) is reported "not available" instead of failing, so
# one script measures before and after they land.
NOT_AVAILABLE = "not available"
RUNS_ADMIN = "/admin/conversations/run/"


def page_reads(*, slug: str, agent_id: int, version_id: int, conversation_id, day) -> list[tuple[str, str]]:
    """(page, URL) of each operator page read: the agent `slug`/`agent_id` (its version
    `version_id`), a conversation, and `day` (a date) for the date hierarchy's reads (the day's
    runs of the agent, as its page links them, and the day's month)."""
    filters = [
        ("agent", {"agent__id__exact": agent_id}),
        ("version", {"agent_version__id__exact": version_id}),
        ("status failed", {"status__exact": "failed"}),
        ("stop reason", {"stop_reason__exact": "provider_error"}),
        # No bench run was started by a schedule: the filter's worst case, a page with no row.
        ("trigger", {"trigger__exact": "schedule"}),
        ("guardrail flagged", {"guardrail": "flag"}),
        # Tags, metadata, costs and durations no bench run has: the runs list reads past every
        # run that does not match (costs in the currency, durations in seconds).
        ("tag", {"tag": "scale-bench"}),
        ("metadata", {"meta": "customer:scale-bench"}),
        ("cost range", {"cost_min": "0.01", "cost_max": "1"}),
        ("duration range", {"duration_min": "60", "duration_max": "600"}),
        ("month", {"created_at__year": day.year, "created_at__month": day.month}),
        (
            "agent's day",
            {
                "agent__id__exact": agent_id,
                "created_at__year": day.year,
                "created_at__month": day.month,
                "created_at__day": day.day,
            },
        ),
    ]
    return [
        ("agent's page", f"/monitor/agents/{slug}/"),
        ("playground", f"/monitor/agents/{slug}/playground/"),
        ("conversation thread", f"/monitor/conversations/{conversation_id}/"),
        ("runs list", RUNS_ADMIN),
        *((f"runs list: {name}", f"{RUNS_ADMIN}?{urlencode(query)}") for name, query in filters),
    ]


def page_unavailable(response) -> bool:
    """Whether a page's answer says its route or filter is not in this code base: a 404 from the
    URL resolver, or the admin's answer to a filter it does not know (the list again with ?e=1)."""
    if response.status_code == 302:
        return "e=1" in response.get("Location", "")
    return False


def _route_missing(url: str) -> bool:
    from django.urls import Resolver404, resolve

    try:
        resolve(urlsplit(url).path)
    except Resolver404:
        return True
    return False


def page_measure(client, page: str, url: str, repeat: int) -> dict:
    """One page read `repeat` times after a first GET (which warms it and counts its statements):
    median and p95 in ms, or NOT_AVAILABLE."""
    from django.db import connection

    row = {"page": page, "url": url}
    if _route_missing(url):
        return {**row, "status": NOT_AVAILABLE}
    # Counted as they are executed: the request's start clears the log that
    # CaptureQueriesContext reads, so a process that logged statements before reads it wrong.
    statements = []

    def count(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        response = client.get(url)
    if page_unavailable(response):
        return {**row, "status": NOT_AVAILABLE}
    if response.status_code != 200:
        raise SystemExit(f"GET {url}: {response.status_code}")
    times = _timed(_getter(client, url), repeat)
    return {
        **row,
        "status": "ok",
        "median_ms": statistics.median(times),
        "p95_ms": percentile(times, 0.95),
        "statements": len(statements),
    }


def _page_subjects() -> dict:
    """The first bench agent, its current version, the conversation of a run picked at random,
    and the day before yesterday (a whole day of runs, its rollups written)."""
    from django.utils import timezone

    from agents.models import Agent
    from agents.services import agent_version_current
    from conversations.models import Run

    agent = Agent.objects.get(slug="scale-ledger-1")
    return {
        "slug": agent.slug,
        "agent_id": agent.pk,
        "version_id": agent_version_current(agent=agent).pk,
        "conversation_id": Run.objects.get(pk=_sample_runs(1)[0]).conversation_id,
        "day": timezone.localdate() - timedelta(days=2),
    }


def page_table(console, repeat: int = REPEAT) -> list[dict]:
    return [page_measure(console, page, url, repeat) for page, url in page_reads(**_page_subjects())]


def pages_summary(pages: list[dict]) -> dict:
    """The slowest measured page (its median and p95) for the size's row."""
    measured = [page for page in pages if page["status"] == "ok"]
    if not measured:
        return {}
    slowest = max(measured, key=lambda page: page["median_ms"])
    return {
        "pages_slowest": slowest["page"],
        "pages_slowest_ms": slowest["median_ms"],
        "pages_slowest_p95_ms": slowest["p95_ms"],
    }


def _export_rate() -> dict:
    """The JSONL export (model calls with their requests, as staff get it) of one day's runs,
    half a year back, read to the end."""
    from django.utils import timezone

    from conversations.export import ledger_export_lines
    from conversations.selectors import runs_for_export

    since = timezone.now() - timedelta(days=SPAN_DAYS // 2)
    runs = runs_for_export(since=since, until=since + timedelta(days=1))
    started, count = time.perf_counter(), 0
    for _ in ledger_export_lines(runs=runs, format="jsonl", requests=True):
        count += 1
    return {"export_runs": count, "export_runs_per_s": count / (time.perf_counter() - started)}


# --- retention beside live runs ------------------------------------------------------------------


class LiveRuns:
    """3-step runs posted and advanced one after another in a thread of their own (its own
    database connection), as bench.step_cost advances them; the wall time of each."""

    def __init__(self, agent):
        self.agent, self.walls, self.stop = agent, [], threading.Event()

    def one(self) -> float:
        from conversations.services import conversation_create
        from engine.admission import message_post
        from engine.loop import run_advance

        run = message_post(conversation=conversation_create(agent=self.agent), content="数一数")
        started = time.perf_counter()
        run_advance(run_id=run.pk)
        return 1000 * (time.perf_counter() - started)

    def _loop(self, limit: int | None) -> None:
        from django.db import connection

        try:
            while not self.stop.is_set() and (limit is None or len(self.walls) < limit):
                self.walls.append(self.one())
        finally:
            connection.close()

    def thread(self, limit: int | None = None) -> threading.Thread:
        thread = threading.Thread(target=self._loop, args=(limit,), daemon=True)
        thread.start()
        return thread


def _purge_oldest(days: int, pause: float) -> dict:
    """Retention over the oldest `days` of every bench agent, committed as the sweep commits it;
    the rows and runs deleted and the seconds it took."""
    from agents.models import Agent
    from conversations.retention import runs_purge

    agents = list(Agent.objects.filter(slug__startswith="scale-ledger-"))
    deleted, runs, started = 0, 0, time.perf_counter()
    for agent in agents:
        agent.retention_days = retention_days(SPAN_DAYS, days)
        counts = runs_purge(agent=agent, pause=pause).counts
        deleted, runs = deleted + sum(counts.values()), runs + counts["runs"]
    return {"deleted": deleted, "runs": runs, "seconds": time.perf_counter() - started}


def _retention(live_agent, days: int, pause: float) -> dict:
    """The oldest `days` purged beside live runs, then written again (as many runs over the same
    days): the next measurement finds the ledger as it was."""
    baseline = LiveRuns(live_agent)
    baseline.thread(limit=LIVE_RUNS).join()
    during = LiveRuns(live_agent)
    thread = during.thread()
    try:
        purge = _purge_oldest(days, pause)
    finally:
        during.stop.set()
        thread.join()
    ledger_add(purge["runs"], days=days, before_days=SPAN_DAYS - days)
    return {
        "rows": purge["deleted"],
        "seconds": purge["seconds"],
        "rows_per_s": purge["deleted"] / purge["seconds"],
        "live_runs": len(during.walls),
        "slowdown": statistics.median(during.walls) / statistics.median(baseline.walls) if during.walls else None,
    }


def _retentions(live_agent, days: int) -> dict:
    """Without the rest between batches, then with the configured one: what the rest buys."""
    from django.conf import settings

    row = {}
    for key, pause in (("retention_nopause", 0.0), ("retention", settings.AGENTRY_RETENTION_PAUSE)):
        measured = _retention(live_agent, days, pause)
        row.update({f"{key}_{name}": value for name, value in measured.items()})
    return row


def _point(size: int, console, api, live_agent, retention_days: int) -> dict:
    grown = ledger_grow(size)
    # What is there, not what was asked: a ledger is never shrunk, and live runs add a few calls.
    row = {"llm_calls": _calls_present(), **grown}
    row.update(_reads(console, api))
    row["pages"] = page_table(console)
    row.update(pages_summary(row["pages"]))
    row.update(_export_rate())
    row.update(_retentions(live_agent, retention_days))
    # Each point as it is measured: the large ones take minutes, and a stopped run keeps them.
    print(f"ledger point: {row}", file=sys.stderr, flush=True)
    return row


def ledger_curve(sizes: list[int], *, retention_days: int = RETENTION_PURGED_DAYS) -> list[dict]:
    """One point per size in `sizes` (model calls), growing the ledger from the smallest up;
    retention purges the oldest `retention_days` at each."""
    from bench import harness
    from bench.stack import free_port
    from bench.step_cost import step_cost_agent
    from engine import tasks

    port = free_port()
    fake = harness.start_fakellm(port)
    # The live runs are advanced in this process: none goes to the queue.
    delay, tasks.run_advance_task.delay = tasks.run_advance_task.delay, lambda run_id: None
    try:
        live_agent = step_cost_agent(f"http://127.0.0.1:{port}", memory=False)
        console, api = _clients()
        LiveRuns(live_agent).thread(limit=3).join()  # warm up: imports, connections, caches
        return [_point(size, console, api, live_agent, retention_days) for size in sorted(sizes)]
    finally:
        tasks.run_advance_task.delay = delay
        harness.stop(fake)


def ledger_reads() -> list[dict]:
    """The reads alone against the ledger present: nothing written to it, no export or
    retention (what to run again once the pages' code changes)."""
    console, api = _clients()
    row = {"llm_calls": _calls_present(), **_reads(console, api)}
    row["pages"] = page_table(console)
    row.update(pages_summary(row["pages"]))
    return [row]


def pages_rows(rows: list[dict]) -> list[dict]:
    """The page reads of every point, a row each, for COLUMNS["ledger_pages"]."""
    return [
        {"llm_calls": row["llm_calls"], **page}
        if page["status"] == "ok"
        else {"llm_calls": row["llm_calls"], "page": page["page"], "median_ms": NOT_AVAILABLE}
        for row in rows
        for page in row.get("pages", [])
    ]


def main() -> None:
    from bench.stack import stack_prepare

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000", help="comma-separated ledger sizes in model calls")
    parser.add_argument(
        "--retention-days", type=int, default=RETENTION_PURGED_DAYS, help="the oldest days retention purges"
    )
    parser.add_argument(
        "--reads-only",
        action="store_true",
        help="measure the reads against the ledger present: grow nothing, no export or retention (--sizes unused)",
    )
    options = parser.parse_args()
    os.environ.setdefault("CELERY_BROKER_URL", os.environ.get("REDIS_URL", ""))
    stack_prepare(script="bench.scale_ledger", env={"AGENTRY_TOOL_MODULES": "demo.tools", "LOG_LEVEL": "WARNING"})
    if options.reads_only:
        rows = ledger_reads()
    else:
        sizes = [int(size) for size in options.sizes.split(",")]
        rows = ledger_curve(sizes, retention_days=options.retention_days)
    print(markdown_table(rows, COLUMNS["ledger_reads" if options.reads_only else "ledger"]))
    print()
    print(markdown_table(pages_rows(rows), COLUMNS["ledger_pages"]))


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    main()
