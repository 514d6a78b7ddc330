"""Model configs and agents on the fake model server, and checks of a run's model calls.
Runs are started and advanced with tests.support.runs. The `fake_llm` fixture (tests/conftest.py)
is a FakeLLM: the shipped fake model server in a thread of the test process."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from agents.models import ModelConfig
from conversations.models import LLMCall, Run
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for


def fake_model(
    fake_llm, script: dict, *, provider: str = "openai_compatible", stream: bool = False, **fields
) -> ModelConfig:
    """A model config whose model name is a freshly installed script of the fake server."""
    name = fake_llm.script(f"t-{uuid.uuid4().hex[:12]}", script)
    return ModelConfigFactory(base_url=fake_llm.api_base, model=name, provider=provider, stream=stream, **fields)


def agent_on(
    fake_llm,
    script: dict,
    *,
    provider: str = "openai_compatible",
    stream: bool = False,
    tools: list[str] = ("test-echo",),
    model_fields: dict | None = None,
    **agent_fields,
):
    model = fake_model(fake_llm, script, provider=provider, stream=stream, **(model_fields or {}))
    return make_agent(tools=list(tools), model_config=model, **agent_fields)


def calls_of(run: Run) -> list[LLMCall]:
    return list(LLMCall.objects.filter(run=run).order_by("started_at", "pk"))


def assert_totals_match_calls(run: Run) -> None:
    run.refresh_from_db()
    calls = LLMCall.objects.filter(run=run)
    for field in ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "total_tokens", "cost"):
        assert getattr(run, field) == sum(getattr(c, field) for c in calls), field


def echo_script(*texts: str, answer: str = "done") -> dict:
    """A script whose model calls test-echo once per text, a step each, then answers."""
    steps = [{"tool_calls": [{"name": "test-echo", "arguments": {"text": text}}]} for text in texts]
    return {"scenarios": [{"match": ".", "steps": [*steps, {"content": answer}]}]}


class FakeLLM:
    def __init__(self, base_url: str):
        self.base_url = base_url
        self.api_base = f"{base_url}/v1"
        # One client for the session: httpx.put() and friends make a client per call, and each
        # loads the CA bundle into a new SSL context (20-40 ms, for a plain-HTTP loopback call
        # that the suite makes about a thousand times).
        self.http = httpx.Client(timeout=10)

    def script(self, name: str, script: dict) -> str:
        response = self.http.put(f"{self.base_url}/_scripts/{name}", json=script)
        response.raise_for_status()
        return name

    def requests(self, model: str) -> list[dict]:
        response = self.http.get(f"{self.base_url}/_requests", params={"model": model, "limit": 500})
        response.raise_for_status()
        return response.json()

    @contextmanager
    def held(self) -> Iterator["HeldAnswers"]:
        """A fresh hold label for a script step (`"hold": held.label`): the step's model calls
        are answered once the test releases them, or when the block ends, however it ends."""
        held = HeldAnswers(self.http, self.base_url, f"hold-{uuid.uuid4().hex[:12]}")
        try:
            yield held
        finally:
            held.release()


class HeldAnswers:
    """The fake model's answers to one hold label, which wait until released: a test acts while a
    model call is certainly in flight, instead of trusting a latency to be long enough."""

    def __init__(self, http: httpx.Client, base_url: str, label: str):
        self.label = label
        self._http = http
        self._url = f"{base_url}/_holds/{label}"

    def state(self) -> dict:
        response = self._http.get(self._url)
        response.raise_for_status()
        return response.json()

    def wait_arrived(self, count: int = 1, timeout: float = 30) -> None:
        """Until `count` requests have reached the hold (being held, or let through once released)."""
        wait_for(lambda: self.state()["arrived"] >= count, timeout=timeout, message=f"{count} held model call(s)")

    def release(self) -> None:
        self._http.post(f"{self._url}/release").raise_for_status()
