"""Both provider adapters satisfy the Provider protocol, and one set of HTTP statuses decides
what is retried, for model calls and webhook deliveries alike."""

import inspect

import httpx
import pytest

from agents.providers import PROVIDERS, Provider, get_provider
from agents.providers.transport import http_error

RETRIED = {408, 409, 425, 429, 500, 502, 503, 504}

NOT_RETRIED = {400, 401, 403, 404, 410, 413, 422}


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
def test_each_adapter_has_the_protocols_methods_and_signatures(kind):
    provider = get_provider(kind)
    assert provider.kind == kind
    for name in ("build_request", "send"):
        expected = inspect.signature(getattr(Provider, name))
        assert inspect.signature(getattr(type(provider), name)) == expected, f"{kind}.{name}"


def test_a_model_server_status_is_retried_exactly_when_it_is_in_the_set():
    request = httpx.Request("POST", "http://model.test/v1/chat/completions")
    for status in RETRIED | NOT_RETRIED:
        error = http_error(
            httpx.Response(status, json={"error": {"message": "no"}}, request=request),
            url=str(request.url),
            body={"model": "m"},
        )
        assert error.retryable == (status in RETRIED), status
