"""One list of token counts: every place that holds a model call's usage holds exactly these, so a
kind added to USAGE_FIELDS cannot be recorded on the call and missed in a total or a rollup."""

from dataclasses import fields

from agents.providers.base import Usage
from api.runs import UsageSerializer
from conversations.models import LLMCall, Run
from conversations.monitoring.models import LLMCallHourly
from conversations.usage import PROMPT_SHARES, USAGE_FIELDS, usage_values


def _token_columns(model) -> tuple[str, ...]:
    return tuple(f.name for f in model._meta.concrete_fields if f.name.endswith("_tokens"))


def _counts(names) -> tuple[str, ...]:
    """The counts of USAGE_FIELDS' kinds: a call's shares of its prompt tokens stand beside them."""
    return tuple(name for name in names if name not in PROMPT_SHARES)


def test_the_calls_the_runs_the_rollups_and_the_api_count_the_same_tokens():
    assert _counts(_token_columns(LLMCall)) == USAGE_FIELDS
    assert set(PROMPT_SHARES) <= set(_token_columns(LLMCall))
    assert _token_columns(LLMCallHourly) == USAGE_FIELDS
    assert tuple(name for name in _token_columns(Run) if name != "children_tokens") == USAGE_FIELDS
    usage_counts = tuple(f.name for f in fields(Usage) if f.name.endswith("_tokens"))
    assert _counts(usage_counts) == USAGE_FIELDS and set(PROMPT_SHARES) <= set(usage_counts)
    assert tuple(name for name in UsageSerializer().fields if name != "estimated") == USAGE_FIELDS


def test_usage_values_reads_each_count_in_order():
    usage = Usage(prompt_tokens=11, completion_tokens=7, cached_tokens=3, reasoning_tokens=2, total_tokens=18)
    assert list(usage_values(usage).items()) == [
        ("prompt_tokens", 11),
        ("completion_tokens", 7),
        ("cached_tokens", 3),
        ("reasoning_tokens", 2),
        ("total_tokens", 18),
    ]
