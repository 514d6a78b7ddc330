"""The baseline: one asyncio process running the same agent loop with no persistence, no queue
and no web layer — the same HTTP calls to the same fake model and the same python tools."""

import asyncio
import json
import time

import httpx

from tools.builtin import demo  # noqa: F401  (registers the demo tools)
from tools.registry import ToolContext, registry

TOOLS = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
         for t in registry.all() if t.name in ("mojitianqi-DayWeather", "gaodedetu-plan_bicycle")]


async def one_run(client: httpx.AsyncClient, api_base: str, model: str, n: int) -> int:
    messages = [{"role": "system", "content": "你是一名智能客服。"}, {"role": "user", "content": f"问题 {n}"}]
    for step in range(10):
        response = await client.post(f"{api_base}/chat/completions",
                                     json={"model": model, "messages": messages, "tools": TOOLS})
        message = response.json()["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            return step + 1
        for index, call in enumerate(message["tool_calls"]):
            tool = registry.get(call["function"]["name"])
            ctx = ToolContext(run_id=str(n), tool_call_id=str(index), idempotency_key=f"{n}:{index}")
            result = tool.func(ctx=ctx, **json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call.get("id", str(index)), "content": result})
    return 10


async def bare_loop(*, api_base: str, model: str, runs: int) -> float:
    limits = httpx.Limits(max_connections=runs + 10, max_keepalive_connections=runs + 10)
    async with httpx.AsyncClient(limits=limits, timeout=60, trust_env=False) as client:
        started = time.perf_counter()
        await asyncio.gather(*(one_run(client, api_base, model, n) for n in range(runs)))
        return time.perf_counter() - started


def measure(*, api_base: str, model: str, runs: int) -> float:
    return asyncio.run(bare_loop(api_base=api_base, model=model, runs=runs))
