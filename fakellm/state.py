"""In-memory server state: installed scripts, request log and fault counters."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from fakellm.prompt_cache import PromptCache
from fakellm.script import Script
from fakellm.validation import ScriptError

REQUEST_LOG_SIZE = 2000


class Hold:
    """A gate that requests of steps with `"hold": LABEL` wait at until a test releases it, so a
    test acts while a model call is certainly in flight instead of hoping a latency is long enough.
    Released once, it stays open: later requests pass, and a release that comes before the
    request arrives is not lost."""

    def __init__(self):
        self.opened = asyncio.Event()
        self.arrived = 0
        self.waiting = 0

    async def wait(self, timeout_s: float) -> bool:
        """False when the timeout passed first (the request is then answered anyway: nothing hangs)."""
        self.arrived += 1
        if self.opened.is_set():
            return True
        self.waiting += 1
        try:
            await asyncio.wait_for(self.opened.wait(), timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            self.waiting -= 1

    def release(self) -> None:
        self.opened.set()

    def state(self) -> dict:
        return {"arrived": self.arrived, "waiting": self.waiting, "released": self.opened.is_set()}


class ServerState:
    def __init__(self, scripts: dict[str, dict]):
        self.scripts: dict[str, Script] = {}
        self.requests: deque[dict] = deque(maxlen=REQUEST_LOG_SIZE)
        self._fault_hits: dict[tuple[str, str], int] = {}
        # Labels are the tests' to choose (unique per test); one gate per label for the server's life.
        self.holds: dict[str, Hold] = {}
        # Requests being answered now, and the most at once since the log was last cleared: shows
        # whether slow requests overlap (the server runs on one event loop, so no lock is needed).
        self.in_flight = 0
        self.max_in_flight = 0
        self.prompt_cache = PromptCache()
        for name, document in scripts.items():
            try:
                self.install(name, document)
            except ScriptError as exc:
                raise ScriptError(f"script {name!r}: {exc}") from None

    def install(self, name: str, document: dict) -> None:
        self.scripts[name] = Script(document)
        # A replaced script starts over, so tests can reuse a name.
        self._fault_hits = {k: v for k, v in self._fault_hits.items() if k[0] != name}

    @contextmanager
    def answering(self) -> Iterator[None]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1

    def hold(self, label: str) -> Hold:
        return self.holds.setdefault(label, Hold())

    def clear_log(self) -> None:
        self.requests.clear()
        self.max_in_flight = self.in_flight

    def scripted_fault_fires(self, model: str, digest: str, fault: dict) -> bool:
        """True while this exact request has been seen at most `times` times."""
        times = fault.get("times")
        if times is None:
            return True
        key = (model, digest)
        seen = self._fault_hits.get(key, 0)
        if seen >= times:
            return False
        self._fault_hits[key] = seen + 1
        return True

    def recent_requests(self, model: str | None, limit: int) -> list[dict]:
        if limit <= 0:
            return []
        found: list[dict] = []
        for body in reversed(self.requests):
            if model is None or body.get("model") == model:
                found.append(body)
                if len(found) == limit:
                    break
        found.reverse()
        return found
