"""The fake server's prompt cache (fakellm.prompt_cache): what each wire reports for a prefix it
has seen. No Django involved."""

import pytest

from fakellm.prompt_cache import PromptCache
from fakellm.reply import Reply, Usage
from fakellm.tokens import prompt_tokens
from fakellm.validation import ScriptError, validate_script


def _count(text: str) -> int:
    return len(text)


def _reply(prompt: int) -> Reply:
    return Reply("ok", [], Usage(prompt, 5))


EPHEMERAL = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "S" * 200, "cache_control": EPHEMERAL}]


def _anthropic(*messages, system=SYSTEM):
    return {"model": "m", "system": system, "messages": list(messages)}


def _user(text: str, cached: bool = True) -> dict:
    block = {"type": "text", "text": text, **({"cache_control": EPHEMERAL} if cached else {})}
    return {"role": "user", "content": [block]}


def test_anthropic_writes_then_reads_the_prefix_closed_by_a_breakpoint():
    cache = PromptCache()
    first = _anthropic(_user("hello " * 20))
    usage = cache.anthropic(first, _reply(prompt_tokens(first, "chars")), _count, 10).usage
    # The last block closed by a breakpoint: the whole prompt is written, nothing read.
    assert usage.cached_tokens == 0 and usage.cache_write_tokens == usage.prompt_tokens > 0
    written = usage.cache_write_tokens
    # The next turn: the same prefix, then more. What was written is read; the rest is written.
    second = _anthropic(
        _user("hello " * 20, cached=False), {"role": "assistant", "content": "hi"}, _user("and tomorrow?")
    )
    usage = cache.anthropic(second, _reply(prompt_tokens(second, "chars")), _count, 10).usage
    assert usage.cached_tokens == written and usage.cache_write_tokens == usage.prompt_tokens - written > 0


def test_anthropic_caches_nothing_shorter_than_the_minimum_or_without_breakpoints():
    cache = PromptCache()
    for _ in range(2):
        short = cache.anthropic(_anthropic(_user("hi")), _reply(1000), _count, 10_000).usage
        assert (short.cached_tokens, short.cache_write_tokens) == (0, 0)
    plain = _anthropic(_user("hello " * 20, cached=False), system="S" * 200)
    for _ in range(2):
        assert cache.anthropic(plain, _reply(1000), _count, 1).usage == Usage(1000, 5)


def test_openai_reads_the_longest_seen_prefix_in_steps_only_with_a_key():
    cache = PromptCache()
    messages = [{"role": "system", "content": "S" * 300}, {"role": "user", "content": "hello"}]
    body = {"model": "m", "messages": messages, "prompt_cache_key": "agent-1-v1-step"}
    assert cache.openai(body, _reply(2000), _count, 100, 64).usage.cached_tokens == 0
    longer = {**body, "messages": [*messages, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]}
    cached = cache.openai(longer, _reply(2000), _count, 100, 64).usage.cached_tokens
    # The first request's whole prompt (2000 tokens), in steps of 64 past 100.
    assert cached == 100 + (2000 - 100) // 64 * 64
    # Another key is another cache; no key, no cache at all (usage as scripted).
    assert cache.openai({**longer, "prompt_cache_key": "other"}, _reply(2000), _count, 100, 64).usage.cached_tokens == 0
    unkeyed = {k: v for k, v in longer.items() if k != "prompt_cache_key"}
    assert cache.openai(unkeyed, _reply(2000), _count, 100, 64).usage == Usage(2000, 5)


def test_a_prompt_counts_the_same_with_or_without_breakpoints():
    system = "S" * 200
    plain = {"model": "m", "system": system, "messages": [{"role": "user", "content": "hello"}]}
    marked = _anthropic(_user("hello"), system=[{"type": "text", "text": system, "cache_control": EPHEMERAL}])
    assert prompt_tokens(marked, "chars") == prompt_tokens(plain, "chars")


@pytest.mark.parametrize("value", [0, -5, 1.5, "64", True])
def test_the_cache_figures_of_a_script_are_positive_integers(value):
    with pytest.raises(ScriptError, match="defaults.cache_min_tokens"):
        validate_script({"defaults": {"cache_min_tokens": value}})
    validate_script({"defaults": {"cache_min_tokens": 64, "cache_step_tokens": 16}})
