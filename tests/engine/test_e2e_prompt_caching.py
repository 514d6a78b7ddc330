"""Prompt caching through a real worker and the fake model server, once per wire format: a
conversation's second message finds the prefix its first one left (the agent's instructions
and tools) in the server's cache, and its call says so in the ledger, cheaper than the tokens at
the input price; with caching off nothing is cached."""

from decimal import Decimal

import pytest

from conversations.models import LLMCall, Run
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.llm import agent_on, assert_totals_match_calls
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

# The fake server caches prefixes from 64 tokens (a quarter of their characters) in steps of 16.
SCRIPT = {
    "defaults": {"cache_min_tokens": 64, "cache_step_tokens": 16},
    "scenarios": [{"match": ".", "steps": [{"content": "Noted: {last_user_message}"}]}],
}
INSTRUCTIONS = "You answer questions about the weather of Chinese cities, briefly and exactly. " * 12
PRICES = {
    "price_input_per_million": "3",
    "price_cached_input_per_million": "0.3",
    "price_output_per_million": "15",
    "price_cache_write_per_million": "3.75",
}


def _finish(run: Run) -> Run:
    run = wait_for(
        lambda: Run.objects.filter(pk=run.pk, status__in=["completed", "failed"]).first(),
        timeout=30,
        message=f"run {run.pk} to end",
    )
    assert run.status == "completed", run.error
    assert_totals_match_calls(run)
    return run


def _two_messages(fake_llm, provider: str, caching: str, stream: bool) -> list[LLMCall]:
    model_fields = {"prompt_caching": caching, **PRICES}
    agent = agent_on(
        fake_llm, SCRIPT, provider=provider, stream=stream, model_fields=model_fields, system_prompt=INSTRUCTIONS
    )
    conversation = conversation_create(agent=agent)
    calls = []
    for text in ("Shanghai today?", "And Chengdu?"):
        run = _finish(message_post(conversation=conversation, content=text))
        calls.append(LLMCall.objects.get(run=run))
    return calls


def _at_input_price(call: LLMCall) -> Decimal:
    return (Decimal(call.prompt_tokens) * 3 + Decimal(call.completion_tokens) * 15) / 1_000_000


STREAM = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


@STREAM
def test_anthropic_reads_back_the_prefix_its_breakpoints_wrote(worker, fake_llm, stream):
    first, second = _two_messages(fake_llm, "anthropic", "auto", stream)
    # The first call wrote tools, instructions and message to the cache (at 1.25 times the
    # input price), reading nothing; the second reads them back.
    assert first.cached_tokens == 0 and first.response["usage"]["cache_creation_input_tokens"] > 0
    assert first.cost > _at_input_price(first)
    written = first.response["usage"]["cache_creation_input_tokens"]
    assert first.cache_write_tokens == written and second.cache_write_tokens < written
    assert second.cached_tokens == written and second.prompt_tokens > first.prompt_tokens
    assert second.cost < _at_input_price(second) and second.cost < first.cost
    body = second.request
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" in body["tools"][-1] and "cache_control" in body["messages"][-1]["content"][-1]


@STREAM
def test_openai_reads_back_the_prefix_under_the_agent_versions_key(worker, fake_llm, stream):
    first, second = _two_messages(fake_llm, "openai_compatible", "on", stream)
    key = f"agent-{first.run.agent_id}-v{first.run.agent_version_id}-step"
    assert first.request["prompt_cache_key"] == second.request["prompt_cache_key"] == key
    assert first.cached_tokens == 0 and first.cost == _at_input_price(first)
    # The instructions, tools and first exchange: a multiple of 16 tokens past 64.
    assert second.cached_tokens >= 64 and (second.cached_tokens - 64) % 16 == 0
    assert second.prompt_tokens > first.prompt_tokens and second.cost < first.cost
    assert second.cost < _at_input_price(second)


@pytest.mark.parametrize("provider", ["anthropic", "openai_compatible"])
def test_with_caching_off_nothing_is_cached(worker, fake_llm, provider):
    first, second = _two_messages(fake_llm, provider, "off", stream=False)
    for call in (first, second):
        assert call.cached_tokens == 0 == call.cache_write_tokens and call.cost == _at_input_price(call)
        assert "cache_control" not in str(call.request) and "prompt_cache_key" not in call.request
    assert second.cost > first.cost
