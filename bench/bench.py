"""Agentry's benchmark: the full stack against a bare loop, measured in the same run.

    DATABASE_URL=postgres://… REDIS_URL=redis://… python -m bench.bench

Real processes on this machine: the shipped fake model server, the ASGI web server (uvicorn),
Celery workers, PostgreSQL and Redis. The baseline (bench/bare_loop.py) is one asyncio process
making the same model calls to the same fake server and running the same python tools, with no
persistence, queue or web layer. Every figure is printed; nothing is asserted.
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

import django
import httpx

from bench.scripts import three_step_script

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")


def _setup_django() -> None:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get("REDIS_URL"):
        sys.exit("bench needs PostgreSQL and Redis: set DATABASE_URL=postgres://… and REDIS_URL=redis://…")
    os.environ.setdefault("CELERY_BROKER_URL", os.environ["REDIS_URL"])
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

    def start(self) -> None:
        # Throttles would cap the benchmark client, not measure the platform.
        env = {"AGENTRY_TOOL_MODULES": "tools.builtin.demo", "LOG_LEVEL": "WARNING",
               "AGENTRY_API_RATE": "1000000/min", "AGENTRY_API_RUN_RATE": "1000000/min",
               "CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"]}
        self.fake = self.harness.start_fakellm(self.llm_port)
        self.processes.append(self.fake)
        self.processes.append(self.harness.start_web(self.web_port, env, workers=self.options.web_workers))
        for index in range(self.options.workers):
            self.processes.append(self.harness.start_worker(
                f"bench-worker-{index}", concurrency=self.options.threads, pool=self.options.pool, env=env))
        time.sleep(2)

    def stop(self) -> None:
        for process in reversed(self.processes):
            self.harness.stop(process)

    def script(self, name: str, script: dict) -> str:
        httpx.put(f"{self.llm_base}/_scripts/{name}", json=script, timeout=10).raise_for_status()
        return name


def _agents(stack: Stack) -> dict:
    from agents.demo import DEMO_TOOLS, demo_seed
    from agents.models import Agent, AgentTool, ModelConfig
    from conversations.tokens import api_token_create
    from django.contrib.auth import get_user_model
    from tools.models import ToolDefinition

    demo_seed(llm_base_url=f"{stack.llm_base}/v1", stream=False)
    tools = list(ToolDefinition.objects.filter(name__in=DEMO_TOOLS))

    def agent(slug: str, script: dict, *, stream=False, approval=None) -> Agent:
        model = stack.script(f"bench-{slug}", script)
        config, _ = ModelConfig.objects.update_or_create(name=f"bench-{slug}", defaults={
            "base_url": f"{stack.llm_base}/v1", "model": model, "stream": stream, "max_retries": 0,
            "read_timeout_seconds": 30})
        found, _ = Agent.objects.update_or_create(slug=f"bench-{slug}", defaults={
            "name": slug, "model_config": config, "system_prompt": "你是一名智能客服。", "max_iterations": 6,
            "concurrent_messages": "reject"})
        for tool in tools:
            AgentTool.objects.update_or_create(agent=found, tool=tool,
                                               defaults={"approval": approval if tool.name == "mojitianqi-DayWeather" and approval else "inherit"})
        return found

    user, _ = get_user_model().objects.get_or_create(username="bench", defaults={"is_staff": True, "is_superuser": True})
    _, token = api_token_create(user=user, name=f"bench {uuid.uuid4().hex[:6]}")
    stamps = {"defaults": {"stream_chunk_delay_ms": 25},
              "scenarios": [{"match": ".", "steps": [{"content": "\u231a" * 40}]}]}
    return {
        "token": token,
        "single": agent("single", three_step_script(stack.options.single_latency_ms)),
        "throughput": agent("throughput", three_step_script(stack.options.latency_ms)),
        "approval": agent("approval", three_step_script(50), approval="always"),
        "stream": agent("stream", stamps, stream=True),
    }


# --- measurements ---------------------------------------------------------------------------

def measure_single(stack: Stack, agents: dict, repeats: int) -> dict:
    from bench.bare_loop import measure

    stack.script("bench-bare-single", three_step_script(stack.options.single_latency_ms))
    bare = [measure(api_base=f"{stack.llm_base}/v1", model="bench-bare-single", runs=1) for _ in range(repeats)]
    headers = {"Authorization": f"Bearer {agents['token']}"}
    full = []
    with httpx.Client(base_url=stack.web, headers=headers, timeout=60) as client:
        for _ in range(repeats + 1):
            started = time.perf_counter()
            response = client.post("/v1/chat/completions", json={
                "model": agents["single"].slug, "messages": [{"role": "user", "content": "明天成都天气如何？"}]})
            response.raise_for_status()
            full.append(time.perf_counter() - started)
    full = full[1:]  # the first request warms the web process up
    return {"bare_s": _median(bare), "full_s": _median(full), "ratio": _median(full) / _median(bare),
            "ideal_s": 3 * stack.options.single_latency_ms / 1000}


async def _post_all(stack: Stack, token: str, slug: str, runs: int) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(base_url=stack.web, headers=headers, timeout=60, limits=limits) as client:
        gate = asyncio.Semaphore(32)

        async def one(n: int) -> str:
            async with gate:
                conversation = (await client.post("/api/v1/conversations/", json={"agent": slug})).json()
                run = await client.post(f"/api/v1/conversations/{conversation['id']}/messages/",
                                        json={"content": f"问题 {n}"})
                run.raise_for_status()
                return run.json()["id"]

        return await asyncio.gather(*(one(n) for n in range(runs)))


def _db_counters() -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT xact_commit, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database "
                       "WHERE datname = current_database()")
        commits, inserted, updated, deleted = cursor.fetchone()
    return {"commits": commits, "rows_written": inserted + updated + deleted}


def measure_throughput(stack: Stack, agents: dict, runs: int) -> dict:
    from bench.bare_loop import measure
    from conversations.models import LLMCall, Run, ToolInvocation

    latency = stack.options.latency_ms / 1000
    ideal = 3 * latency
    stack.script("bench-bare-throughput", three_step_script(stack.options.latency_ms))
    bare = measure(api_base=f"{stack.llm_base}/v1", model="bench-bare-throughput", runs=runs)
    bare_httpx = measure(api_base=f"{stack.llm_base}/v1", model="bench-bare-throughput", runs=runs, client="httpx")

    ours = [p.pid for p in stack.processes if p is not stack.fake]
    before_ours = sum(stack.harness.tree_cpu_seconds(pid) for pid in ours)
    before_services = stack.harness.named_cpu_seconds("postgres", "redis-server")
    before_cpu = stack.harness.machine_cpu_seconds()
    before_fake = stack.harness.process_cpu_seconds(stack.fake.pid)
    before_self = time.process_time()
    before_db = _db_counters()
    started = time.perf_counter()
    run_ids = asyncio.run(_post_all(stack, agents["token"], agents["throughput"].slug, runs))
    posted = time.perf_counter() - started
    while Run.objects.filter(pk__in=run_ids, status__in=["queued", "running"]).exists():
        time.sleep(0.02)
    wall = time.perf_counter() - started
    cpu = stack.harness.machine_cpu_seconds() - before_cpu
    ours_cpu = sum(stack.harness.tree_cpu_seconds(pid) for pid in ours) - before_ours
    services_cpu = stack.harness.named_cpu_seconds("postgres", "redis-server") - before_services
    fake_cpu = stack.harness.process_cpu_seconds(stack.fake.pid) - before_fake
    client_cpu = time.process_time() - before_self
    after_db = _db_counters()
    steps = (LLMCall.objects.filter(run_id__in=run_ids).count()
             + LLMCall.objects.filter(run_id__in=run_ids).exclude(tool_invocations=None).count())
    statuses = {}
    for status in Run.objects.filter(pk__in=run_ids).values_list("status", flat=True):
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "bare_s": bare, "bare_eff": ideal / bare, "bare_httpx_s": bare_httpx, "full_s": wall, "full_eff": ideal / wall,
        "ratio": (ideal / wall) / (ideal / bare), "post_s": posted, "statuses": statuses,
        "cpu_ms_per_run": 1000 * (cpu - fake_cpu - client_cpu) / runs, "cpu_machine_s": cpu,
        "cpu_ms_per_run_own": 1000 * (ours_cpu + services_cpu) / runs,
        "cpu_ms_per_run_web_workers": 1000 * ours_cpu / runs,
        "cpu_fake_s": fake_cpu, "cpu_client_s": client_cpu, "steps": steps,
        "tool_invocations": ToolInvocation.objects.filter(run_id__in=run_ids).count(),
        "rows_per_step": (after_db["rows_written"] - before_db["rows_written"]) / max(steps, 1),
        "commits_per_step": (after_db["commits"] - before_db["commits"]) / max(steps, 1),
    }


def measure_queries_per_step(stack: Stack, agents: dict) -> dict:
    """One run advanced in this process with every SQL statement counted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents import tasks
    from agents.engine.loop import run_advance
    from conversations.models import LLMCall
    from conversations.services import conversation_create, message_post

    # Keep this run off the queue: it is advanced here, where its statements can be counted.
    delay, tasks.run_advance_task.delay = tasks.run_advance_task.delay, lambda run_id: None
    try:
        run = message_post(conversation=conversation_create(agent=agents["single"]), content="数一数")
    finally:
        tasks.run_advance_task.delay = delay
    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)
    steps = LLMCall.objects.filter(run=run).count() + LLMCall.objects.filter(run=run).exclude(tool_invocations=None).count()
    return {"queries": len(queries), "steps": steps, "queries_per_step": len(queries) / max(steps, 1)}


def measure_approval_resume(stack: Stack, agents: dict, samples: int) -> dict:
    from conversations.models import Approval, LLMCall, Run

    headers = {"Authorization": f"Bearer {agents['token']}"}
    delays = []
    with httpx.Client(base_url=stack.web, headers=headers, timeout=30) as client:
        for n in range(samples):
            conversation = client.post("/api/v1/conversations/", json={"agent": agents["approval"].slug}).json()
            run_id = client.post(f"/api/v1/conversations/{conversation['id']}/messages/",
                                 json={"content": f"审批 {n}"}).json()["id"]
            deadline = time.monotonic() + 30
            while not (approval := Approval.objects.filter(run_id=run_id, status="pending").first()):
                if time.monotonic() > deadline:
                    raise RuntimeError("no approval requested")
                time.sleep(0.01)
            while Run.objects.get(pk=run_id).status != "awaiting_approval":
                time.sleep(0.005)
            decided = time.time()
            client.post(f"/api/v1/approvals/{approval.pk}/decision/", json={"decision": "approve"}).raise_for_status()
            while not (call := LLMCall.objects.filter(run_id=run_id, iteration=2).first()):
                time.sleep(0.002)
            delays.append(call.started_at.timestamp() - decided)
    return {"median_ms": 1000 * _median(delays), "p95_ms": 1000 * _p95(delays), "samples": len(delays)}


async def _relay_one(stack: Stack, token: str, slug: str) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    latencies = []
    async with httpx.AsyncClient(base_url=stack.web, headers=headers, timeout=60) as client:
        conversation = (await client.post("/api/v1/conversations/", json={"agent": slug})).json()
        run = (await client.post(f"/api/v1/conversations/{conversation['id']}/messages/",
                                 json={"content": "说点什么"})).json()
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


def measure_delta_relay(stack: Stack, agents: dict, samples: int) -> dict:
    latencies = []
    for _ in range(samples):
        latencies += asyncio.run(_relay_one(stack, agents["token"], agents["stream"].slug))
    return {"median_ms": _median(latencies), "p95_ms": _p95(latencies), "deltas": len(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="runs in flight for the throughput figure")
    parser.add_argument("--latency-ms", type=int, default=1000, help="simulated model latency, throughput")
    parser.add_argument("--single-latency-ms", type=int, default=200, help="simulated model latency, single run")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--threads", type=int, default=100, help="threads per worker process")
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--web-workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--llm-port", type=int, default=8941)
    parser.add_argument("--web-port", type=int, default=8942)
    parser.add_argument("--only", default="single,throughput,queries,approval,relay")
    options = parser.parse_args()
    _setup_django()
    stack = Stack(options)
    stack.start()
    wanted = set(options.only.split(","))
    results = {}
    try:
        agents = _agents(stack)
        if "single" in wanted:
            results["single"] = measure_single(stack, agents, options.repeats)
            print("single run:", results["single"], flush=True)
        if "throughput" in wanted:
            results["throughput"] = measure_throughput(stack, agents, options.runs)
            print("throughput:", results["throughput"], flush=True)
        if "queries" in wanted:
            results["queries"] = measure_queries_per_step(stack, agents)
            print("queries:", results["queries"], flush=True)
        if "approval" in wanted:
            results["approval"] = measure_approval_resume(stack, agents, options.repeats * 2)
            print("approval:", results["approval"], flush=True)
        if "relay" in wanted:
            results["relay"] = measure_delta_relay(stack, agents, max(2, options.repeats // 2))
            print("relay:", results["relay"], flush=True)
    finally:
        stack.stop()
    _print_summary(options, results)


def _print_summary(options, results: dict) -> None:
    print(f"\nAgentry benchmark ({os.cpu_count()} cores; {options.workers} worker process(es) × "
          f"{options.threads} {options.pool}):")
    if "single" in results:
        r = results["single"]
        print(f"  single 3-step run at {options.single_latency_ms} ms: full stack {r['full_s'] * 1000:.0f} ms, "
              f"bare loop {r['bare_s'] * 1000:.0f} ms (ideal {r['ideal_s'] * 1000:.0f}) → ratio {r['ratio']:.3f} (target ≤ 1.05)")
    if "throughput" in results:
        r = results["throughput"]
        print(f"  {options.runs} runs in flight × 3 calls at {options.latency_ms} ms: full stack {r['full_s']:.2f} s "
              f"(efficiency {r['full_eff']:.3f}), bare loop {r['bare_s']:.2f} s (efficiency {r['bare_eff']:.3f}) "
              f"→ ratio {r['ratio']:.3f} (target ≥ 0.9); a bare loop on httpx's shared async pool: "
              f"{r['bare_httpx_s']:.2f} s (efficiency {3 * options.latency_ms / 1000 / r['bare_httpx_s']:.3f})")
        print(f"  CPU per run over all processes (web, workers, broker, database): {r['cpu_ms_per_run_own']:.1f} ms "
              f"(web and workers {r['cpu_ms_per_run_web_workers']:.1f} ms; whole machine less the fake model "
              f"and the client: {r['cpu_ms_per_run']:.1f} ms); "
              f"rows written per step {r['rows_per_step']:.1f}; commits per step {r['commits_per_step']:.1f}")
    if "queries" in results:
        print(f"  database queries per step: {results['queries']['queries_per_step']:.1f}")
    if "approval" in results:
        r = results["approval"]
        print(f"  approval decision → next model call: median {r['median_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms (target ≤ 100)")
    if "relay" in results:
        r = results["relay"]
        print(f"  text delta at the model → SSE client: median {r['median_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms (target ≤ 50)")


if __name__ == "__main__":
    main()
