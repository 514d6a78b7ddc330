from agents.providers.anthropic import AnthropicProvider
from agents.providers.base import LLMResponse, Provider, ProviderError, ToolCall, Usage
from agents.providers.openai_compatible import OpenAICompatibleProvider

PROVIDERS: dict[str, Provider] = {
    provider.kind: provider for provider in (OpenAICompatibleProvider(), AnthropicProvider())
}


def get_provider(kind: str) -> Provider:
    try:
        return PROVIDERS[kind]
    except KeyError:
        raise ProviderError(f"Unknown provider kind {kind!r}.", retryable=False) from None


__all__ = ["LLMResponse", "Provider", "ProviderError", "ToolCall", "Usage", "get_provider"]
