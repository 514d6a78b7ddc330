"""Engine tests that drive runs in-process against the fake model server.

`start_run` posts the user message without handing the run to the broker (a worker left
running by an end-to-end test would otherwise race the in-process loop); `advance` then
takes every step in this process, as a worker would.
"""

import uuid
from unittest import mock

from agents.engine.loop import run_advance
from agents.models import ModelConfig
from conversations.models import Conversation, LLMCall, Run
from conversations.services import conversation_create, message_post
from tests.factories import ModelConfigFactory, make_agent


def fake_model(fake_llm, script: dict, *, provider: str = "openai_compatible", stream: bool = False,
               **fields) -> ModelConfig:
    """A model config whose model name is a freshly installed script of the fake server."""
    name = fake_llm.script(f"t-{uuid.uuid4().hex[:12]}", script)
    return ModelConfigFactory(base_url=fake_llm.api_base, model=name, provider=provider, stream=stream,
                              **fields)


def agent_on(fake_llm, script: dict, *, provider: str = "openai_compatible", stream: bool = False,
             tools: list[str] = ("test-echo",), model_fields: dict | None = None, **agent_fields):
    model = fake_model(fake_llm, script, provider=provider, stream=stream, **(model_fields or {}))
    return make_agent(tools=list(tools), model_config=model, **agent_fields)


def start_run(agent, content: str, conversation: Conversation | None = None) -> Run:
    conversation = conversation or conversation_create(agent=agent)
    with mock.patch("agents.tasks.run_advance_task.delay"):
        return message_post(conversation=conversation, content=content)


def advance(run: Run) -> Run:
    run_advance(run_id=run.pk)
    run.refresh_from_db()
    return run


def ask(agent, content: str, conversation: Conversation | None = None) -> Run:
    return advance(start_run(agent, content, conversation))


def calls_of(run: Run) -> list[LLMCall]:
    return list(LLMCall.objects.filter(run=run).order_by("started_at", "pk"))


def assert_totals_match_calls(run: Run) -> None:
    run.refresh_from_db()
    calls = LLMCall.objects.filter(run=run)
    for field in ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "total_tokens", "cost"):
        assert getattr(run, field) == sum(getattr(c, field) for c in calls), field
