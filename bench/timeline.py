"""Where a single run's time goes: the client's clock against the run's events, step by step.

    DATABASE_URL=postgres://… REDIS_URL=redis://… python -m bench.timeline [--runs 15] [--latency-ms 200]

The same stack and 3-step run as bench.bench's single-run figure (the fake model server, 2 web
workers, 2 Celery worker processes, PostgreSQL, Redis; two read tool steps, then the answer),
posted through `/v1/chat/completions` one after another. Every event row carries the time its
batch was built (`created_at`), in the same clock as the client's (one machine), so each interval
of a run is measured where it happens: from the request to the run's row, through the queue to
the worker's claim, each model call and tool step, to the end's row and to the response in the
client's hands. Printed: each interval's median and spread over the runs (the first one warms the
processes up and is left out), and the sum of the medians against the model's latency.
"""

import argparse
import statistics
import time
from datetime import UTC, datetime

import httpx

from bench import machine
from bench.bench import Stack, _agents, _setup_django


def _events(run_id) -> list[tuple[str, float]]:
    from conversations.models import RunEvent

    rows = RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", "created_at")
    return [(kind, created.timestamp()) for kind, created in rows]


def _intervals(sent: float, received: float, events: list[tuple[str, float]], latency: float) -> list[tuple]:
    """(name, seconds) of one run's intervals, in order, from one event to the next; a model
    call's (from its row to its answer's record) is what it took beyond the model's latency."""
    labels = {"llm_call.started": "model call {} started", "llm_call.completed": "model call {} answered"}
    labels |= {"tool.started": "tool {} started", "tool.completed": "tool {} recorded"}
    counts = {"llm_call.started": 0, "tool.started": 0}
    named, previous, at = [], "request sent", sent
    for kind, when in events:
        if kind in counts:
            counts[kind] += 1
        number = counts["llm_call.started" if kind.startswith("llm_call") else "tool.started"]
        label = labels.get(kind, kind).format(number)
        beyond = kind == "llm_call.completed"
        name = f"{previous} → {label}" + (f" (beyond the model's {latency * 1000:.0f} ms)" if beyond else "")
        named.append((name, when - at - (latency if beyond else 0)))
        previous, at = label, when
    named.append((f"{previous} → response received", received - at))
    return named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="runs measured, after one of warm-up")
    parser.add_argument("--latency-ms", type=int, default=200, help="simulated model latency")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--llm-port", type=int, default=8943)
    parser.add_argument("--web-port", type=int, default=8944)
    options = parser.parse_args()
    # What bench.bench's Stack and agents read.
    options.pool, options.single_latency_ms, options.latency_ms = "threads", options.latency_ms, options.latency_ms
    print(f"Agentry single-run timeline on {machine.describe()}; load average: {machine.load_average()}", flush=True)
    _setup_django()
    from conversations.models import Run

    stack = Stack(options)
    try:
        stack.start()
        agents = _agents(stack)
        agent = agents["single"]
        headers = {"Authorization": f"Bearer {agents['token']}"}
        runs: list[list[tuple]] = []
        walls = []
        with httpx.Client(base_url=stack.web, headers=headers, timeout=60) as client:
            for index in range(options.runs + 1):
                sent = time.time()
                response = client.post(
                    "/v1/chat/completions",
                    json={"model": agent.slug, "messages": [{"role": "user", "content": "明天成都天气如何？"}]},
                )
                received = time.time()
                response.raise_for_status()
                run = Run.objects.filter(agent=agent).order_by("-created_at").first()
                if index == 0:
                    continue  # warms the processes up
                walls.append(received - sent)
                runs.append(_intervals(sent, received, _events(run.pk), options.latency_ms / 1000))
    finally:
        stack.stop()
    shapes = {tuple(name for name, _ in run) for run in runs}
    if len(shapes) != 1:
        print(f"the runs took {len(shapes)} different paths; their intervals are not comparable")
        return
    print(f"\n{len(runs)} runs, each 3 model calls at {options.latency_ms} ms; medians (min–max), ms:")
    total = 0.0
    for position, name in enumerate(next(iter(shapes))):
        values = [run[position][1] * 1000 for run in runs]
        total += statistics.median(values)
        print(f"  {statistics.median(values):7.1f}  ({min(values):.1f}–{max(values):.1f})  {name}")
    print(f"  {total:7.1f}  in all beyond the model's {3 * options.latency_ms} ms")
    print(f"wall time per run: median {statistics.median(walls) * 1000:.1f} ms")
    print(f"(measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; load average after: {machine.load_average()})")


if __name__ == "__main__":
    main()
