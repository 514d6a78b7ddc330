from agents.providers.anthropic import AnthropicProvider
from agents.providers.base import LLMResponse, ProviderError, ToolCall, Usage
from agents.providers.openai_compatible import OpenAICompatibleProvider

PROVIDERS = {"openai_compatible": OpenAICompatibleProvider(), "anthropic": AnthropicProvider()}


def get_provider(kind: str):
    try:
        return PROVIDERS[kind]
    except KeyError:
        raise ProviderError(f"Unknown provider kind {kind!r}.", retryable=False) from None


__all__ = ["LLMResponse", "ProviderError", "ToolCall", "Usage", "get_provider"]
