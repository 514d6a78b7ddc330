"""Agentry's benchmark: the full stack against a bare loop, measured in the same run.

    DATABASE_URL=postgres://… REDIS_URL=redis://… python -m bench.bench [--repeat 3] [--runs 200]

Real processes on this machine: the shipped fake model server, the ASGI web server (uvicorn),
Celery workers, PostgreSQL and Redis. The baseline (bench/bare_loop.py) is one asyncio process
making the same model calls to the same fake server and running the same python tools, with no
persistence, queue or web layer. Every figure is measured `--repeat` times, each repetition
measuring the full stack and its bare loop back to back so their ratio comes from one window;
min and median are printed, with each target beside its ratio. Nothing is asserted: a figure
that fails is printed as failed and the others still run. Exit code 0 when every figure was
measured, 1 when one failed.
"""

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
import uuid

import aiohttp
import django
import httpx

from bench import machine
from bench.report import Results, describe_error, spread, verdict
from bench.saturation import measure_saturation, one_step_script
from bench.scripts import three_step_script

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")

FIGURES = {
    "single": ["single.bare", "single.full", "ratio.single"],
    "throughput": [
        "throughput.bare",
        "throughput.bare_httpx",
        "throughput.full",
        "ratio.throughput",
        "accept",
        "cpu_per_run",
    ],
    "approval": ["approval"],
    "relay": ["relay"],
    "queries": ["statements_per_step", "commits_per_step", "flushed_commits_per_step", "rows_per_step"],
    "saturation": ["saturation", "saturation.cpu_per_run"],
}
# The processes that serve runs; the fake model and the benchmark client are printed apart.
SERVING = ("web", "worker", "postgres", "redis")
WRITES = ("INSERT", "UPDATE", "DELETE")
_MODIFIES = re.compile(r"\b(INSERT|UPDATE|DELETE)\b")


def _setup_django() -> None:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get("REDIS_URL"):
        sys.exit("bench needs PostgreSQL and Redis: set DATABASE_URL=postgres://… and REDIS_URL=redis://…")
    os.environ.setdefault("CELERY_BROKER_URL", os.environ["REDIS_URL"])
    # The run advanced in this process (statements per step) would log every step among the figures.
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _median(values) -> float:
    return statistics.median(values) if values else float("nan")


def _p95(values) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else float("nan")


class Stack:
    """The processes of one benchmark run, and the rows it needs."""

    def __init__(self, options):
        from bench import harness

        self.options = options
        self.harness = harness
        self.llm_port, self.web_port = options.llm_port, options.web_port
        self.llm_base = f"http://127.0.0.1:{self.llm_port}"
        self.web = f"http://127.0.0.1:{self.web_port}"
        self.processes = []
        self.kinds: dict[str, list[int]] = {"web": [], "worker": [], "fake model server": []}

    def start(self) -> None:
        # Throttles would cap the benchmark client, not measure the platform.
        env = {
            "AGENTRY_TOOL_MODULES": "demo.tools",
            "LOG_LEVEL": "WARNING",
            "AGENTRY_API_RATE": "1000000/min",
            "AGENTRY_API_RUN_RATE": "1000000/min",
            "CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"],
        }
        self.fake = self.harness.start_fakellm(self.llm_port)
        self._keep("fake model server", self.fake)
        self._keep("web", self.harness.start_web(self.web_port, env, workers=self.options.web_workers))
        for index in range(self.options.workers):
            self._keep(
                "worker",
                self.harness.start_worker(
                    f"bench-worker-{index}", concurrency=self.options.threads, pool=self.options.pool, env=env
                ),
            )
        time.sleep(2)

    def _keep(self, kind: str, process) -> None:
        self.processes.append(process)
        self.kinds[kind].append(process.pid)

    def stop(self) -> None:
        for process in reversed(self.processes):
            self.harness.stop(process)

    def script(self, name: str, script: dict) -> str:
        httpx.put(f"{self.llm_base}/_scripts/{name}", json=script, timeout=10).raise_for_status()
        return name


def _agents(stack: Stack) -> dict:
    from django.contrib.auth import get_user_model

    from agents.models import Agent, AgentTool, ModelConfig
    from conversations.tokens import api_token_create
    from demo.seed import DEMO_TOOLS, demo_seed
    from tools.models import ToolDefinition

    # A new fake model port each time: the demo rows follow it (the database outlives a run).
    demo = demo_seed(llm_base_url=f"{stack.llm_base}/v1", stream=False, reset=True)
    tools = list(ToolDefinition.objects.filter(workspace_id=demo.workspace_id, name__in=DEMO_TOOLS))

    def agent(slug: str, script: dict, *, stream=False, approval=None) -> Agent:
        model = stack.script(f"bench-{slug}", script)
        config, _ = ModelConfig.objects.update_or_create(
            name=f"bench-{slug}",
            defaults={
                "base_url": f"{stack.llm_base}/v1",
                "model": model,
                "stream": stream,
                "max_retries": 0,
                "read_timeout_seconds": 30,
            },
        )
        found, _ = Agent.objects.update_or_create(
            slug=f"bench-{slug}",
            defaults={
                "name": slug,
                "model_config": config,
                "system_prompt": "你是一名智能客服。",
                "max_iterations": 6,
                "concurrent_messages": "reject",
            },
        )
        for tool in tools:
            gated = approval and tool.name == "mojitianqi-DayWeather"
            AgentTool.objects.update_or_create(
                agent=found, tool=tool, defaults={"approval": approval if gated else "inherit"}
            )
        return found

    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    _, token = api_token_create(user=user, name=f"bench {uuid.uuid4().hex[:6]}")
    stamps = {
        "defaults": {"stream_chunk_delay_ms": 25},
        "scenarios": [{"match": ".", "steps": [{"content": "\u231a" * 40}]}],
    }
    stack.script("bench-bare-single", three_step_script(stack.options.single_latency_ms))
    stack.script("bench-bare-throughput", three_step_script(stack.options.latency_ms))
    return {
        "token": token,
        "single": agent("single", three_step_script(stack.options.single_latency_ms)),
        "throughput": agent("throughput", three_step_script(stack.options.latency_ms)),
        "approval": agent("approval", three_step_script(50), approval="always"),
        "stream": agent("stream", stamps, stream=True),
        "saturation": agent("saturation", one_step_script()),
    }


def _until(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(what)


# --- measurements: each records one repetition of its figures into `results` -------------------


def single_bare(results: Results, stack: Stack) -> None:
    """The median of `--single-runs` bare runs, one after another."""
    from bench.bare_loop import measure

    walls = [
        measure(api_base=f"{stack.llm_base}/v1", model="bench-bare-single", runs=1)
        for _ in range(stack.options.single_runs)
    ]
    results.add("single.bare", _median(walls))


def single_full(results: Results, stack: Stack, agents: dict, warm_up: bool) -> None:
    """The median of `--single-runs` runs through the chat completions endpoint, one after another:
    one run's wall time varies by tens of milliseconds on a shared machine, more than the
    difference the ratio is after."""
    headers = {"Authorization": f"Bearer {agents['token']}"}
    walls = []
    with httpx.Client(base_url=stack.web, headers=headers, timeout=60) as client:
        # The first request of a run warms the web process up (imports, connections) and is not counted.
        for counted in ([False] if warm_up else []) + [True] * stack.options.single_runs:
            started = time.perf_counter()
            response = client.post(
                "/v1/chat/completions",
                json={"model": agents["single"].slug, "messages": [{"role": "user", "content": "明天成都天气如何？"}]},
            )
            response.raise_for_status()
            if counted:
                walls.append(time.perf_counter() - started)
    results.add("single.full", _median(walls))


def throughput_bare(results: Results, stack: Stack, client: str) -> None:
    from bench.bare_loop import measure

    name = "throughput.bare" if client == "aiohttp" else "throughput.bare_httpx"
    results.add(
        name,
        measure(api_base=f"{stack.llm_base}/v1", model="bench-bare-throughput", runs=stack.options.runs, client=client),
    )


async def _conversations(stack: Stack, token: str, slug: str, runs: int) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=stack.web, headers=headers, timeout=60) as client:
        gate = asyncio.Semaphore(32)

        async def one() -> str:
            async with gate:
                response = await client.post("/api/v1/conversations/", json={"agent": slug})
                response.raise_for_status()
                return response.json()["id"]

        return await asyncio.gather(*(one() for _ in range(runs)))


async def _post_all(stack: Stack, token: str, conversations: list[str]) -> list[str]:
    """The posts, at most 32 at a time over 32 kept-alive connections. The client is aiohttp, as in
    the bare loop: httpx's async client cost 3.5-4 ms of CPU per post, taken from the two cores the
    server is measured on (its CPU is still printed as the benchmark client's)."""
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=32)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(stack.web, headers=headers, connector=connector, timeout=timeout) as session:

        async def one(n: int, conversation: str) -> str:
            path = f"/api/v1/conversations/{conversation}/messages/"
            async with session.post(path, json={"content": f"问题 {n}"}) as run:
                run.raise_for_status()
                return (await run.json())["id"]

        return await asyncio.gather(*(one(n, c) for n, c in enumerate(conversations)))


def _postgres_pids() -> list[int]:
    """This database's backends and the server's own background processes (WAL writer,
    checkpointer), less the benchmark's own connection, which only polls for the end."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND (datname = current_database() OR datname IS NULL)"
        )
        return [pid for (pid,) in cursor.fetchall()]


def _cpu_meter(stack: Stack) -> machine.CpuMeter:
    return machine.CpuMeter(
        trees=stack.kinds,
        listed={
            "postgres": _postgres_pids,
            "redis": lambda: machine.named_pids("redis-server"),
            "benchmark client": lambda: [os.getpid()],
        },
    )


def _open_runs(run_model, run_ids: str, terminal: str) -> list[str]:
    """Which of the runs (`run_ids`, comma-separated) have not ended (`terminal`: the ended
    statuses, comma-separated): one statement with two text parameters. The benchmark asks while
    the runs are in flight, on the cores it measures: the ORM's filter of 200 ids cost 1.0-1.5 ms
    of this process's CPU a time (each id parsed and sent as a parameter of its own), most of the
    client's CPU after the posts. The caller asks next only for the runs still open."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT "id"::text FROM "{run_model._meta.db_table}" '
            """WHERE "id" = ANY(string_to_array(%s, ',')::uuid[]) """
            """AND NOT ("status" = ANY(string_to_array(%s, ',')))""",
            [run_ids, terminal],
        )
        return [run_id for (run_id,) in cursor.fetchall()]


def throughput_full(results: Results, stack: Stack, agents: dict) -> None:
    from conversations.models import TERMINAL_STATUSES, Run

    runs = stack.options.runs
    # Conversations exist before the clock starts: the figure is accepting messages, as a chat
    # client posting into open conversations does.
    conversations = asyncio.run(_conversations(stack, agents["token"], agents["throughput"].slug, runs))
    meter = _cpu_meter(stack)
    meter.start()
    started = time.perf_counter()
    run_ids = asyncio.run(_post_all(stack, agents["token"], conversations))
    results.add("accept", time.perf_counter() - started)
    accepting = meter.read()
    deadline = time.monotonic() + stack.options.timeout
    ids, ended = ",".join(run_ids), ",".join(TERMINAL_STATUSES)
    # Each poll asks only for the runs the last one found open, and waits longer the more runs
    # were posted (20 ms for 200, the same share of the ideal wall time at bench.scale's 2,000):
    # asking for all 2,000 every 20 ms took a PostgreSQL backend 20 ms a time (pg_stat_statements),
    # half a core taken from the stack being measured.
    interval = 0.02 * max(1.0, runs / 200)
    while still_open := _open_runs(Run, ids, ended):
        _until(deadline, f"{len(still_open)} of {runs} runs still open after {stack.options.timeout} s")
        ids = ",".join(still_open)
        time.sleep(interval)
    wall = time.perf_counter() - started
    cpu = meter.read()
    statuses = {}
    for status in Run.objects.filter(pk__in=run_ids).values_list("status", flat=True):
        statuses[status] = statuses.get(status, 0) + 1
    # bench.scale tolerates a few failed runs at 2,000 in flight (printed beside its figures);
    # bench.bench none.
    if runs - statuses.get("completed", 0) > getattr(stack.options, "tolerated_failures", 0):
        raise RuntimeError(f"runs did not all complete: {statuses}")
    results.add("runs_failed", runs - statuses.get("completed", 0))
    results.add("throughput.full", wall)
    results.add("cpu_per_run", 1000 * sum(cpu[kind] for kind in SERVING) / runs)
    for kind, seconds in cpu.items():
        results.add(f"cpu.{kind}", 1000 * seconds / runs)
    for kind, seconds in accepting.items():
        results.add(f"accept_cpu.{kind}", 1000 * seconds / runs)


def _transactions(statements: list[str], *, flushed_only: bool = False) -> int:
    """Commits: each COMMIT, and each write sent outside BEGIN … COMMIT (autocommit). With
    `flushed_only`, less the writes in autocommit that commit asynchronously (conversations.batch):
    those that wait for their WAL on disk."""
    from conversations.batch import ASYNCHRONOUS_COMMIT

    count, open_ = 0, False
    for sql in statements:
        if flushed_only and not open_ and ASYNCHRONOUS_COMMIT in sql:
            continue
        verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if verb == "BEGIN":
            open_ = True
        elif verb in ("COMMIT", "ROLLBACK"):
            count += verb == "COMMIT"
            open_ = False
        elif not open_ and (
            verb in WRITES or (verb == "WITH" and re.search(r"\b(INSERT|UPDATE|DELETE)\b", sql.upper()))
        ):
            count += 1
    return count


def _rows_written() -> int:
    """Rows inserted, updated and deleted in this database so far, from PostgreSQL's statistics
    (a data-modifying WITH writes several tables; its row count names only the last)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables")
        return int(cursor.fetchone()[0])


def measure_queries_per_step(results: Results, stack: Stack, agents: dict) -> None:
    """One run advanced in this process with every statement sent through Django counted (BEGIN
    and COMMIT included: each is a round trip, and so is a statement sent in autocommit, which is
    its own transaction), and the rows written, from PostgreSQL's statistics."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from conversations.models import LLMCall
    from conversations.services import conversation_create
    from engine import tasks
    from engine.admission import message_post
    from engine.loop import run_advance

    # Keep this run off the queue: it is advanced here, where its statements can be counted.
    delay, tasks.run_advance_task.delay = tasks.run_advance_task.delay, lambda run_id: None
    try:
        run = message_post(conversation=conversation_create(agent=agents["single"]), content="数一数")
    finally:
        tasks.run_advance_task.delay = delay
    before = _rows_written()
    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)
    rows = _rows_written() - before
    calls = LLMCall.objects.filter(run=run)
    # A step is a model call, and the tool calls it asked for are a second step.
    steps = calls.count() + calls.exclude(tool_invocations=None).count()
    if not steps:
        raise RuntimeError("the run made no model call")
    statements = [query["sql"] for query in queries]
    results.add("statements_per_step", len(statements) / steps)
    results.add("commits_per_step", _transactions(statements) / steps)
    results.add("flushed_commits_per_step", _transactions(statements, flushed_only=True) / steps)
    results.add("rows_per_step", rows / steps)


def measure_approval_resume(results: Results, stack: Stack, agents: dict) -> None:
    from conversations.models import Approval, LLMCall, Run

    headers = {"Authorization": f"Bearer {agents['token']}"}
    delays = []
    deadline = time.monotonic() + stack.options.timeout
    with httpx.Client(base_url=stack.web, headers=headers, timeout=30) as client:
        for n in range(stack.options.samples):
            conversation = client.post("/api/v1/conversations/", json={"agent": agents["approval"].slug}).json()
            run_id = client.post(
                f"/api/v1/conversations/{conversation['id']}/messages/", json={"content": f"审批 {n}"}
            ).json()["id"]
            while not (approval := Approval.objects.filter(run_id=run_id, status="pending").first()):
                _until(deadline, "no approval requested")
                time.sleep(0.01)
            while Run.objects.get(pk=run_id).status != "awaiting_approval":
                _until(deadline, "the run did not park for its approval")
                time.sleep(0.005)
            decided = time.time()
            client.post(f"/api/v1/approvals/{approval.pk}/decision/", json={"decision": "approve"}).raise_for_status()
            while not (call := LLMCall.objects.filter(run_id=run_id, iteration=2).first()):
                _until(deadline, "no model call after the approval")
                time.sleep(0.002)
            delays.append(1000 * (call.started_at.timestamp() - decided))
    results.samples["approval.each"] += delays
    results.add("approval", _median(delays))


async def _relay_one(stack: Stack, token: str, slug: str) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    latencies = []
    async with httpx.AsyncClient(base_url=stack.web, headers=headers, timeout=60) as client:
        conversation = (await client.post("/api/v1/conversations/", json={"agent": slug})).json()
        run = (
            await client.post(f"/api/v1/conversations/{conversation['id']}/messages/", json={"content": "说点什么"})
        ).json()
        async with client.stream("GET", f"/api/v1/runs/{run['id']}/events/") as stream:
            event = None
            async for line in stream.aiter_lines():
                now_us = time.time_ns() // 1000
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event == "message.delta":
                    text = json.loads(line[5:])["payload"]["text"]
                    latencies += [(now_us - int(stamp)) / 1000 for stamp in re.findall("\u231a(\\d+)", text)]
                elif line.startswith("data:") and event in ("run.completed", "run.failed"):
                    break
    return latencies


def measure_delta_relay(results: Results, stack: Stack, agents: dict) -> None:
    latencies = []
    for _ in range(stack.options.relay_runs):
        # Keepalives would hold a stream that never ends open forever; the whole run has a deadline.
        latencies += asyncio.run(
            asyncio.wait_for(_relay_one(stack, agents["token"], agents["stream"].slug), timeout=stack.options.timeout)
        )
    if not latencies:
        raise RuntimeError("no stamped text delta reached the client")
    results.samples["relay.each"] += latencies
    results.add("relay", _median(latencies))


# --- orchestration -------------------------------------------------------------------------------


def _ratio(results: Results, name: str, numerator: str, denominator: str, counts: dict) -> None:
    """The ratio of two figures measured in the same repetition, or its failure."""
    fresh = [
        results.samples[part][-1] for part in (numerator, denominator) if len(results.samples[part]) > counts[part]
    ]
    if len(fresh) == 2:
        results.add(name, fresh[0] / fresh[1])
    else:
        results.fail(name, f"{numerator} or {denominator} not measured in this repetition")


def _repetition(results: Results, stack: Stack, agents: dict, wanted: set, index: int) -> None:
    counts = {name: len(results.samples[name]) for names in FIGURES.values() for name in names}
    errors = {name: len(results.errors[name]) for name in counts}
    if "single" in wanted:
        results.attempt(["single.bare"], single_bare, stack)
        results.attempt(["single.full"], single_full, stack, agents, index == 0)
        _ratio(results, "ratio.single", "single.full", "single.bare", counts)
    if "throughput" in wanted:
        results.attempt(["throughput.bare"], throughput_bare, stack, "aiohttp")
        results.attempt(["throughput.bare_httpx"], throughput_bare, stack, "httpx")
        results.attempt(["accept", "throughput.full", "cpu_per_run"], throughput_full, stack, agents)
        _ratio(results, "ratio.throughput", "throughput.bare", "throughput.full", counts)
    if "approval" in wanted:
        results.attempt(["approval"], measure_approval_resume, stack, agents)
    if "saturation" in wanted:
        results.attempt(FIGURES["saturation"], measure_saturation, stack, agents, _cpu_meter(stack), SERVING)
    if "relay" in wanted:
        results.attempt(["relay"], measure_delta_relay, stack, agents)
    # A statement count does not vary with load: one repetition is enough.
    if "queries" in wanted and index == 0:
        results.attempt(FIGURES["queries"], measure_queries_per_step, stack, agents)
    measured = {name: results.samples[name][-1] for name in counts if len(results.samples[name]) > counts[name]}
    failed = [name for name in errors if len(results.errors[name]) > errors[name]]
    print(
        f"repetition {index + 1}: "
        + ", ".join(f"{name} {value:.3f}" for name, value in measured.items())
        + (f"; failed: {', '.join(failed)}" if failed else ""),
        flush=True,
    )
    if "cpu_per_run" in measured:
        _print_kinds("  its CPU per run by process kind", results, "cpu.")


def _print_kinds(label: str, results: Results, prefix: str) -> None:
    """The last sample of each process kind's CPU per run: where one repetition's CPU went."""
    kinds = [name for name in results.samples if name.startswith(prefix)]
    print(
        f"{label}: " + ", ".join(f"{name.removeprefix(prefix)} {results.samples[name][-1]:.1f} ms" for name in kinds),
        flush=True,
    )


def _warm_up(stack: Stack, agents: dict) -> None:
    """One throughput round before the counted repetitions, printed apart. The first round on a
    new stack pays for what later rounds reuse: every pooled connection is opened, each hot
    statement is parsed, prepared on its connection at its second sending and planned afresh
    for its first five executions there, and each process's first calls import and build what
    it keeps. Counted, it was the dearest repetition by a fifth and most of the spread; the second
    round was still dearer than the later ones in one run of two (docs/benchmark.md)."""
    warm = Results()
    warm.attempt(["throughput.full", "cpu_per_run"], throughput_full, stack, agents)
    if warm.failed():
        print(f"warm-up round: failed: {warm.errors['throughput.full'][0]}", flush=True)
        return
    print(
        f"warm-up round (not counted): throughput.full {warm.median('throughput.full'):.3f} s, "
        f"cpu_per_run {warm.median('cpu_per_run'):.3f} ms",
        flush=True,
    )
    _print_kinds("  its CPU per run by process kind", warm, "cpu.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="runs in flight for the throughput figure")
    parser.add_argument("--latency-ms", type=int, default=1000, help="simulated model latency, throughput")
    parser.add_argument("--single-latency-ms", type=int, default=200, help="simulated model latency, single run")
    parser.add_argument(
        "--single-runs", type=int, default=5, help="single runs per repetition (their median is the repetition's)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of every figure (min and median printed)")
    parser.add_argument("--samples", type=int, default=5, help="approvals per repetition")
    parser.add_argument("--relay-runs", type=int, default=2, help="streamed runs per repetition")
    parser.add_argument("--timeout", type=float, default=300, help="seconds one repetition of a figure may wait")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--threads", type=int, default=100, help="threads per worker process")
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--web-workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--llm-port", type=int, default=8941)
    parser.add_argument("--web-port", type=int, default=8942)
    parser.add_argument("--only", default=",".join(FIGURES), help=f"comma-separated subset of {','.join(FIGURES)}")
    parser.add_argument(
        "--warm-up", type=int, default=2, help="throughput rounds before the repetitions, printed apart (0: none)"
    )
    parser.add_argument(
        "--saturation-clients", type=int, default=48, help="runs kept in flight for the saturation figure"
    )
    parser.add_argument("--saturation-warm-up", type=float, default=5, help="seconds before the saturation window")
    parser.add_argument("--saturation-seconds", type=float, default=20, help="the saturation figure's window")
    options = parser.parse_args()
    wanted = set(options.only.split(","))
    print(f"Agentry benchmark on {machine.describe()}; load average before: {machine.load_average()}", flush=True)
    print(
        f"stack: {options.web_workers} uvicorn worker(s), {options.workers} Celery worker process(es) × "
        f"{options.threads} {options.pool}; {options.repeat} repetition(s) of each figure",
        flush=True,
    )
    results = Results()
    stack = Stack(options)
    try:
        _setup_django()
        stack.start()
        agents = _agents(stack)
    except Exception as error:  # without the stack no figure can be measured; say so and finish
        for key in wanted:
            for name in FIGURES.get(key, []):
                results.fail(name, f"the stack did not start: {describe_error(error)}")
    else:
        if "throughput" in wanted:
            for _ in range(options.warm_up):
                _warm_up(stack, agents)
        for index in range(options.repeat):
            _repetition(results, stack, agents, wanted, index)
    finally:
        stack.stop()
    _print_summary(options, results, wanted)
    print(f"\nload average after: {machine.load_average()}")
    failed = results.failed()
    print("every figure was measured" if not failed else f"{len(failed)} figure(s) failed: {', '.join(failed)}")
    sys.exit(1 if failed else 0)


def _print_summary(options, results: Results, wanted: set) -> None:
    ms = {"unit": " ms", "scale": 1000}
    ideal = 3 * options.latency_ms / 1000
    print(f"\nfigures (min and median over {options.repeat} repetition(s)):")
    if "single" in wanted:
        print(
            f"  single 3-step run at {options.single_latency_ms} ms (ideal {3 * options.single_latency_ms} ms; "
            f"each repetition the median of {options.single_runs} runs): "
            f"full stack {spread(results, 'single.full', **ms)}; bare loop {spread(results, 'single.bare', **ms)}"
        )
    if "throughput" in wanted:
        print(
            f"  {options.runs} runs in flight × 3 calls at {options.latency_ms} ms (ideal {ideal:.2f} s): "
            f"full stack {spread(results, 'throughput.full', ' s', digits=2)}; "
            f"bare loop {spread(results, 'throughput.bare', ' s', digits=2)}"
        )
        print(
            f"    httpx baseline (a bare loop on httpx's shared async pool): "
            f"{spread(results, 'throughput.bare_httpx', ' s', digits=2)}"
        )
        for name, label in (("throughput.full", "full stack"), ("throughput.bare", "bare loop")):
            if results.samples[name]:
                print(f"    efficiency (ideal ÷ wall), {label}: median {ideal / results.median(name):.3f}")
        print(
            f"  accepting {options.runs} posted messages with {options.web_workers} web workers: "
            f"{spread(results, 'accept', ' s', digits=2)}"
        )
        print(
            f"  CPU per run over web, workers, PostgreSQL and Redis: {spread(results, 'cpu_per_run', ' ms', digits=1)}"
        )
    if "approval" in wanted:
        print(
            f"  approval decision → next model call ({options.samples} per repetition; each repetition's median): "
            f"{spread(results, 'approval', ' ms', digits=1)}; "
            f"p95 of all {_p95(results.samples['approval.each']):.1f} ms"
        )
    if "saturation" in wanted:
        loads = "; ".join(results.notes["saturation.load"]) or "–"
        print(
            f"  sustained runs per second at saturation, one-step agent, model answering in 0 ms "
            f"({options.saturation_clients} runs kept in flight through /v1/chat/completions, counted over "
            f"{options.saturation_seconds:g} s after {options.saturation_warm_up:g} s of warm-up): "
            f"{spread(results, 'saturation', ' runs/s', digits=1)}; "
            f"CPU per run {spread(results, 'saturation.cpu_per_run', ' ms', digits=1)}; "
            f"load average at each window's end: {loads}"
        )
    if "relay" in wanted:
        print(
            f"  text delta at the model → SSE client ({options.relay_runs} streamed runs per repetition; "
            f"each repetition's median): {spread(results, 'relay', ' ms', digits=1)}; "
            f"p95 of all {_p95(results.samples['relay.each']):.1f} ms"
        )

    print("\ntargets (medians; a ratio is taken within each repetition, then the median of those):")
    targets = [  # figure group, label, figure, target, whether the target is a ceiling, digits, unit
        (
            "throughput",
            f"efficiency at {options.runs} in flight, full stack ÷ bare loop",
            "ratio.throughput",
            0.9,
            False,
            3,
            "",
        ),
        ("throughput", "CPU per run over all processes", "cpu_per_run", 30, True, 1, " ms"),
        ("single", "single run, full stack ÷ bare loop", "ratio.single", 1.05, True, 3, "×"),
        ("throughput", f"accepting {options.runs} posts", "accept", 1, True, 2, " s"),
        ("approval", "approve → next model call", "approval", 100, True, 1, " ms"),
        ("relay", "model delta → SSE client", "relay", 50, True, 1, " ms"),
    ]
    for key, label, name, target, at_most, digits, unit in targets:
        if key not in wanted:
            continue
        value = results.median(name)
        shown = "failed" if value is None else f"{value:.{digits}f}{unit}"
        sign = "≤" if at_most else "≥"
        print(f"  {label}: {shown} (target {sign} {target:g}{unit}): {verdict(value, target, at_most=at_most)}")

    print("\nwhere the time goes:")
    if "throughput" in wanted:
        kinds = [name for name in results.samples if name.startswith("cpu.")]
        if kinds:
            print(
                "  CPU per run by process kind during the throughput figure (median): "
                + ", ".join(f"{name.removeprefix('cpu.')} {results.median(name):.1f} ms" for name in kinds)
            )
            print(
                "    (postgres: this database's backends and the server's background processes; redis: the "
                "whole server; rest of the machine: every other program, which should be near zero)"
            )
            accepting = [name for name in results.samples if name.startswith("accept_cpu.")]
            print(
                "  of which while the posts were accepted, per post (median): "
                + ", ".join(f"{name.removeprefix('accept_cpu.')} {results.median(name):.1f} ms" for name in accepting)
            )
            print(
                "    (the accept figure is the machine's cores shared by all of these: the workers start "
                "the first runs while the last posts arrive)"
            )
        else:
            print("  CPU per process kind: not measured (the throughput figure failed)")
    if "saturation" in wanted and results.samples["saturation"]:
        print(
            "  CPU per run by process kind at saturation (median): "
            + ", ".join(
                f"{name.removeprefix('saturation_cpu.')} {results.median(name):.1f} ms"
                for name in results.samples
                if name.startswith("saturation_cpu.")
            )
        )
    if "queries" in wanted:
        labels = {
            "statements_per_step": "statements (BEGIN/COMMIT included)",
            "commits_per_step": "commits (COMMITs, and writes sent in autocommit)",
            "flushed_commits_per_step": "commits that wait for their flush to disk",
            "rows_per_step": "rows written",
        }
        print(
            "  per step, one 3-step run advanced in this process (a count; measured once): "
            + ", ".join(
                f"{label} {'failed' if (value := results.median(name)) is None else f'{value:.1f}'}"
                for name, label in labels.items()
            )
        )
        if results.errors["statements_per_step"]:
            print(f"    {spread(results, 'statements_per_step')}")


if __name__ == "__main__":
    main()
