"""The token counts of a model call, by kind (seed 000's usage, with cached and reasoning tokens).

They are columns of LLMCall (one call's), of Run (its totals) and of the hourly rollups, fields of
the provider's Usage, and the keys of a run's usage wherever it is shown whole (webhooks,
exports): one list, in one order, for all of them.
"""

USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "total_tokens")
# Of a call's prompt tokens, those of the images and audio it sent (agents.providers.media) and
# those it wrote to the provider's prompt cache (Anthropic's cache_creation_input_tokens, priced
# apart): on the call and its provider's Usage only, beside USAGE_FIELDS (a run's totals count
# them as prompt tokens).
PROMPT_SHARES = ("image_tokens", "audio_tokens", "cache_write_tokens")


def usage_values(source) -> dict[str, int]:
    """The counts of `source` (a provider's Usage, a call, a run) by field, in USAGE_FIELDS' order."""
    return {field: getattr(source, field) for field in USAGE_FIELDS}
