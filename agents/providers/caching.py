"""What a request asks of the provider's prompt cache, by the model config's `prompt_caching`
(agents.models.PromptCaching; snapshots pinned before the setting have none: auto).

Anthropic caches only what a request marks: a `cache_control` breakpoint closes a prefix
(tools, then system, then messages) that a later request starting with the same bytes reads
back at a tenth of the input price; at most four per request. OpenAI caches every long prompt by
itself; `prompt_cache_key` only groups requests sharing a prefix onto the same cache, and other
OpenAI-compatible servers may refuse a field they do not know, so on auto it goes to OpenAI's
own address only.
"""

from urllib.parse import urlsplit

AUTO, ON, OFF = "auto", "on", "off"
EPHEMERAL = {"type": "ephemeral"}
# Anthropic refuses a request with more breakpoints than this.
MAX_BREAKPOINTS = 4
OPENAI_HOSTS = ("api.openai.com",)
# An internal message's key (engine.context): its content opens with the end user's memories,
# this many characters of it (a string content), or its first part (a list content).
MEMORY_CHARS = "memory_chars"


def caching(model: dict) -> str:
    return model.get("prompt_caching") or AUTO


def sends_cache_key(model: dict) -> bool:
    """Whether an OpenAI-compatible request carries `prompt_cache_key`."""
    mode = caching(model)
    if mode == AUTO:
        return (urlsplit(model.get("base_url") or "").hostname or "") in OPENAI_HOSTS
    return mode == ON


def cache_key(*, agent_id: int, version_id: int | None, purpose: str) -> str:
    """One key per agent version and kind of call (an agent step's prefix is not a summary's):
    the same for every end user and conversation, and nothing in it but ids."""
    return f"agent-{agent_id}-v{version_id or 0}-{purpose}"
