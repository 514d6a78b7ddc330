"""The runs-in-flight axis of bench.scale: bench.bench's throughput figure at more runs at once.

Each point starts its own stack (bench.bench.Stack: the fake model, 2 uvicorn workers, 2 Celery
worker processes, PostgreSQL and Redis), warms it up, then measures the bare loop and the full
stack back to back with N runs of 3 model calls posted at once, as bench.bench does.

What limits concurrency, and what is set here:
- a Celery worker thread holds each run it carries (it waits for the engine loop to finish the
  run's slice), and the prefetch multiplier is 1, so a process carries at most its thread count:
  each of the 2 processes gets half the runs plus a tenth for an uneven split;
- one worker process keeps at most 1,000 model connections open (platform_site.green_http), so
  2 processes carry 2,000 model calls at once;
- the two cores: a run costs some 25 ms of CPU over every process, so the machine completes at
  most some 80 runs a second. With the model answering in 1 s, 2,000 runs could not be in flight
  at once: the posts would queue behind the CPU and the figure would measure a saturated
  machine, not concurrency. The model's latency therefore grows with N (5 ms per run in flight:
  1 s at 200, as bench.bench, 5 s at 1,000, 10 s at 2,000), which keeps the work per second the
  same at every point, so the curve shows what holding more runs open costs;
- the database pool (20 connections per process) and the fake model server (one asyncio
  process, backlog 2,048) are not reached: the engine loop borrows a connection only between
  two waits.
"""

import argparse
from pathlib import Path

from bench import machine
from bench.bench import Stack, _agents, throughput_bare, throughput_full
from bench.report import Results
from bench.scripts import three_step_script
from bench.stack import free_port

WORKERS = 2
LATENCY_MS_PER_RUN = 5
WARM_UP_RUNS = 50


def latency_ms(runs: int) -> int:
    return LATENCY_MS_PER_RUN * runs


def threads_per_worker(runs: int) -> int:
    return runs // WORKERS + max(runs // (10 * WORKERS), 5)


def _options(runs: int) -> argparse.Namespace:
    return argparse.Namespace(
        runs=runs,
        latency_ms=latency_ms(runs),
        single_latency_ms=200,
        timeout=300 + 3 * latency_ms(runs) / 1000,
        workers=WORKERS,
        threads=threads_per_worker(runs),
        pool="threads",
        web_workers=2,
        llm_port=free_port(),
        web_port=free_port(),
        # A model call that fails is not retried by the bench's agents: on a loaded machine a few of
        # 2,000 may fail on a connection the fake model server closed (printed as runs failed).
        tolerated_failures=runs // 50,
    )


def peak_resident_mb(pids: list[int]) -> float:
    """The largest peak resident set (VmHWM) among `pids`, in MiB."""
    peaks = []
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) / 1024)
    return max(peaks)


def _script(stack: Stack, latency: int) -> None:
    stack.script("bench-throughput", three_step_script(latency))
    stack.script("bench-bare-throughput", three_step_script(latency))


def _warm_up(stack: Stack, agents: dict) -> None:
    """A first round of runs opens the pooled connections and prepares the statements: the
    first repetition of bench.bench is its dearest."""
    runs, stack.options.runs = stack.options.runs, WARM_UP_RUNS
    _script(stack, 100)
    try:
        throughput_full(Results(), stack, agents)
    finally:
        stack.options.runs = runs
        _script(stack, stack.options.latency_ms)


def _point(runs: int) -> dict:
    stack = Stack(_options(runs))
    results = Results()
    try:
        stack.start()
        agents = _agents(stack)
        _warm_up(stack, agents)
        results.attempt(["throughput.bare"], throughput_bare, stack, "aiohttp")
        results.attempt(["throughput.full", "cpu_per_run"], throughput_full, stack, agents)
        peak = peak_resident_mb(stack.kinds["worker"])
    finally:
        stack.stop()
    failed = results.failed()
    if failed:
        raise RuntimeError(f"{runs} runs in flight: " + "; ".join(results.errors[name][0] for name in failed))
    ideal = 3 * latency_ms(runs) / 1000
    full, bare = results.median("throughput.full"), results.median("throughput.bare")
    point = {
        "runs_in_flight": runs,
        "latency_ms": latency_ms(runs),
        "threads_per_worker": threads_per_worker(runs),
        "efficiency": bare / full,
        "full_ideal_ratio": ideal / full,
        "bare_ideal_ratio": ideal / bare,
        "cpu_ms_per_run": results.median("cpu_per_run"),
        "runs_failed": int(results.median("runs_failed")),
        **{f"cpu_ms_{kind}": results.median(f"cpu.{kind}") for kind in ("worker", "web", "postgres", "redis")},
        "worker_peak_mb": peak,
    }
    # Printed as it is measured: a later point that fails does not take this one with it.
    print(
        f"{runs:,} in flight (load average {machine.load_average()}): "
        + ", ".join(f"{key} {value:.3f}" for key, value in point.items() if key != "runs_in_flight"),
        flush=True,
    )
    return point


def runs_curve(sizes: list[int]) -> list[dict]:
    """One point per size in `sizes` (runs in flight), each on a stack of its own."""
    return [_point(runs) for runs in sizes]
