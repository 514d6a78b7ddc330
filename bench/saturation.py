"""Sustained runs per second at saturation: the figure a user compares across products.

A one-step agent (one model call answered at once with a final answer, no tools) posted through
`/v1/chat/completions` by `clients` concurrent clients, each posting its next run as soon as its
last one answers, so the same number of runs is always in flight: enough to keep both cores
busy, so the figure is what the machine completes, not how fast the clients ask. The first
`warm_up` seconds open connections and prepare statements; completed runs are then counted over
the next `window` seconds, with the CPU each process kind used meanwhile.
"""

import asyncio
import time

import aiohttp

from bench import machine
from bench.report import Results

SCRIPT_NAME = "bench-saturation"


def one_step_script() -> dict:
    """One model call, answered at once (0 ms) with the final answer."""
    return {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {
                        "content": "明天多云，建议骑行。",
                        "latency_ms": 0,
                        "usage": {"prompt_tokens": 900, "completion_tokens": 20},
                    }
                ],
            }
        ]
    }


async def _closed_loop(stack, token: str, model: str, clients: int, warm_up: float, window: float, meter) -> dict:
    loop = asyncio.get_running_loop()
    finished: list[float] = []
    failures: list[str] = []
    ends = loop.time() + warm_up + window
    headers = {"Authorization": f"Bearer {token}"}
    body = {"model": model, "messages": [{"role": "user", "content": "明天成都天气如何？"}]}
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(stack.web, headers=headers, connector=connector, timeout=timeout) as session:

        async def client() -> None:
            while loop.time() < ends:
                async with session.post("/v1/chat/completions", json=body) as response:
                    await response.read()
                    if response.status == 200:
                        finished.append(time.perf_counter())
                    else:
                        failures.append(str(response.status))

        async def clock() -> dict:
            await asyncio.sleep(warm_up)
            # The meter reads PostgreSQL's backends through Django, which refuses an event loop's thread.
            await asyncio.to_thread(meter.start)
            started = time.perf_counter()
            await asyncio.sleep(window)
            cpu = await asyncio.to_thread(meter.read)
            return {"started": started, "ended": time.perf_counter(), "cpu": cpu, "load": machine.load_average()}

        *_, measured = await asyncio.gather(*(client() for _ in range(clients)), clock())
    measured["completed"] = sum(measured["started"] <= at <= measured["ended"] for at in finished)
    measured["failures"] = failures
    return measured


def measure_saturation(results: Results, stack, agents: dict, meter: machine.CpuMeter, serving: tuple) -> None:
    """Records runs/s over the window and CPU per run of the `serving` process kinds."""
    options = stack.options
    measured = asyncio.run(
        _closed_loop(
            stack,
            agents["token"],
            agents["saturation"].slug,
            options.saturation_clients,
            options.saturation_warm_up,
            options.saturation_seconds,
            meter,
        )
    )
    if measured["failures"]:
        raise RuntimeError(f"{len(measured['failures'])} runs answered with an error: {measured['failures'][:5]}")
    completed = measured["completed"]
    if not completed:
        raise RuntimeError("no run completed within the window")
    seconds = measured["ended"] - measured["started"]
    results.add("saturation", completed / seconds)
    results.add("saturation.cpu_per_run", 1000 * sum(measured["cpu"][kind] for kind in serving) / completed)
    for kind, used in measured["cpu"].items():
        results.add(f"saturation_cpu.{kind}", 1000 * used / completed)
    results.notes["saturation.load"].append(measured["load"])
