"""A write endpoint that counts: the outside witness of the chaos test.

`POST /writes` records one effective write per `Idempotency-Key` (a repeat with the same key is
answered with the first result and not counted again, as a well-behaved payment or booking API
does) and keeps every raw request, so a summary can tell deliveries from effective writes.
`GET /writes` returns the tallies. `--delay-ms` holds each answer after the write is recorded,
as a slow remote API does: a worker killed in that window leaves a write whose outcome it never
learnt. Run alone: `python -m bench.counting_service --port 8930`.
"""

import argparse
import asyncio
import threading
from collections import Counter

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests: Counter = Counter()
        self.effective: dict[str, dict] = {}
        self.missing_key = 0

    def summary(self) -> dict:
        with self.lock:
            return {
                "requests": sum(self.requests.values()),
                "keys": len(self.effective),
                "redelivered_keys": sum(1 for n in self.requests.values() if n > 1),
                "missing_key": self.missing_key,
                "per_key": dict(self.requests),
            }


def create_app(tally: Tally | None = None, delay_ms: int = 0) -> Starlette:
    tally = tally or Tally()

    async def write(request: Request):
        key = request.headers.get("idempotency-key")
        body = await request.json()
        with tally.lock:
            if not key:
                tally.missing_key += 1
                return JSONResponse({"error": "Idempotency-Key header required"}, status_code=400)
            tally.requests[key] += 1
            first = tally.effective.setdefault(key, {"write": len(tally.effective) + 1, "body": body})
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        return JSONResponse({"recorded": first["write"], "key": key})

    async def report(request: Request):
        return JSONResponse(tally.summary())

    app = Starlette(routes=[Route("/writes", write, methods=["POST"]), Route("/writes", report, methods=["GET"])])
    app.state.tally = tally
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8930)
    parser.add_argument("--delay-ms", type=int, default=0, help="answer this long after recording a write")
    options = parser.parse_args()
    uvicorn.run(
        create_app(delay_ms=options.delay_ms),
        host=options.host,
        port=options.port,
        log_level="warning",
        access_log=False,
    )
