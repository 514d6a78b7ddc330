"""The baseline: one asyncio process running the same agent loop with no persistence, no queue
and no web layer — the same HTTP calls to the same fake model and the same python tools.

Two clients are measured. aiohttp is the baseline the ratios use: it is the fastest here, so
the comparison is against the best a bare loop can do. httpx's AsyncClient with one shared pool
is printed beside it because its pool slows down with hundreds of connections (encode/httpx#3215).
"""

import asyncio
import json
import time

import aiohttp
import httpx

import demo.tools  # noqa: F401  (registers the demo tools)
from tools.registry import ToolContext, registry

TOOLS = [
    {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
    for t in registry.all()
    if t.name in ("mojitianqi-DayWeather", "gaodedetu-plan_bicycle")
]


def _run_tools(message: dict, messages: list, n: int) -> None:
    for index, call in enumerate(message["tool_calls"]):
        tool = registry.get(call["function"]["name"])
        ctx = ToolContext(run_id=str(n), tool_call_id=str(index), idempotency_key=f"{n}:{index}")
        result = tool.func(ctx=ctx, **json.loads(call["function"]["arguments"]))
        messages.append({"role": "tool", "tool_call_id": call.get("id", str(index)), "content": result})


async def _one_run(post, api_base: str, model: str, n: int) -> int:
    """The model calls one run made; a run that never answers fails the baseline rather than
    making it look fast."""
    messages = [{"role": "system", "content": "你是一名智能客服。"}, {"role": "user", "content": f"问题 {n}"}]
    for step in range(10):
        body = await post(f"{api_base}/chat/completions", {"model": model, "messages": messages, "tools": TOOLS})
        message = body["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            return step + 1
        _run_tools(message, messages, n)
    raise RuntimeError(f"bare run {n}: no final answer after 10 model calls")


async def _aiohttp_loop(api_base: str, model: str, runs: int) -> float:
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=60)
    ) as session:

        async def post(url, body):
            async with session.post(url, json=body) as response:
                response.raise_for_status()
                return await response.json()

        started = time.perf_counter()
        await asyncio.gather(*(_one_run(post, api_base, model, n) for n in range(runs)))
        return time.perf_counter() - started


async def _httpx_loop(api_base: str, model: str, runs: int) -> float:
    limits = httpx.Limits(max_connections=runs + 10, max_keepalive_connections=runs + 10)
    async with httpx.AsyncClient(limits=limits, timeout=60, trust_env=False) as client:

        async def post(url, body):
            return (await client.post(url, json=body)).raise_for_status().json()

        started = time.perf_counter()
        await asyncio.gather(*(_one_run(post, api_base, model, n) for n in range(runs)))
        return time.perf_counter() - started


def measure(*, api_base: str, model: str, runs: int, client: str = "aiohttp") -> float:
    """Wall seconds for `runs` runs in flight at once."""
    loop = _aiohttp_loop if client == "aiohttp" else _httpx_loop
    return asyncio.run(loop(api_base, model, runs))
