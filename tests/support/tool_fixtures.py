"""Python tools that exist only in the test suite, registered through AGENTRY_TOOL_MODULES.

`test-counter` is a side-effecting tool with an outside witness: every execution increments
a Redis counter, so a test can prove how many times it really ran, even across processes.
"""

import json
import os

import redis

from conversations.models import Run
from engine.runs import run_cancel
from tools.registry import python_tool

COUNTER_KEY = "agentry-test:executions"


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"))


@python_tool(
    name="test-counter",
    description="Records that it ran; a write with a side effect.",
    parameters={"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]},
    side_effect="write",
)
def counter(*, ctx, label: str) -> str:
    client = redis_client()
    client.hincrby(COUNTER_KEY, label, 1)
    client.rpush(f"{COUNTER_KEY}:keys:{label}", ctx.idempotency_key)
    return json.dumps({"recorded": label})


@python_tool(
    name="test-echo",
    description="Returns its text argument.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
        "required": ["text"],
    },
)
def echo(*, ctx, text: str, times: int = 1) -> str:
    return text * times


# Several types, formats, bounds and nesting: what the fake model's generic mode must fill in.
BOOKING_SCHEMA = {
    "type": "object",
    "properties": {
        "guest": {"type": "string", "minLength": 2, "maxLength": 60},
        "email": {"type": "string", "format": "email"},
        "arrival": {"type": "string", "format": "date"},
        "nights": {"type": "integer", "minimum": 1, "maximum": 14},
        "budget": {"type": "number", "exclusiveMinimum": 0, "maximum": 800},
        "breakfast": {"type": "boolean"},
        "room": {"type": "string", "enum": ["single", "double", "suite"]},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{4}$"},
        "extras": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "uniqueItems": True},
        "contact": {
            "type": "object",
            "properties": {"phone": {"type": "string", "pattern": "^[0-9]{11}$"}, "note": {"type": ["string", "null"]}},
            "required": ["phone"],
            "additionalProperties": False,
        },
    },
    "required": ["guest", "arrival", "nights", "room", "code", "contact"],
    "additionalProperties": False,
}


@python_tool(name="test-booking", description="Books a room; returns what it was given.", parameters=BOOKING_SCHEMA)
def booking(*, ctx, **arguments) -> str:
    return json.dumps({"booked": arguments}, ensure_ascii=False, sort_keys=True)


@python_tool(
    name="test-fail",
    description="Always raises.",
    parameters={"type": "object", "properties": {}},
)
def fail(*, ctx) -> str:
    raise RuntimeError("backend unavailable")


@python_tool(
    name="test-cancel-run",
    description="Asks for its own run to be cancelled, as a person would while it runs.",
    parameters={"type": "object", "properties": {}},
)
def cancel_own_run(*, ctx) -> str:
    run_cancel(run=Run.objects.get(pk=ctx.run_id))
    return "cancel requested"


SANDBOX_PID_KEY = "agentry-test:sandbox-pid"


@python_tool(
    name="test-hog",
    description="Uses the CPU or memory without end; runs sandboxed.",
    parameters={"type": "object", "properties": {"resource": {"enum": ["cpu", "memory"]}}, "required": ["resource"]},
    timeout_seconds=2,
    sandboxed=True,
)
def hog(*, ctx, resource: str) -> str:
    redis_client().set(SANDBOX_PID_KEY, os.getpid())
    if resource == "memory":
        hoard = [bytearray(64 * 1024 * 1024) for _ in range(64)]
        return f"kept {len(hoard)} blocks"
    while True:
        pass


@python_tool(
    name="test-where",
    description="Names the thread that ran it and the threads of its process.",
    parameters={"type": "object", "properties": {}},
)
def where(*, ctx) -> str:
    import threading

    return json.dumps(
        {
            "on": threading.current_thread().name.rstrip("_0123456789"),
            "threads": sorted({thread.name.rstrip("_0123456789") for thread in threading.enumerate()}),
        }
    )
