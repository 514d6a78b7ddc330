"""Model configs and agents on the fake model server, and checks of a run's model calls.
Runs are started and advanced with tests.support.runs."""

import uuid

from agents.models import ModelConfig
from conversations.models import LLMCall, Run
from tests.support.factories import ModelConfigFactory, make_agent


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
