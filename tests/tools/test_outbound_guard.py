"""The network guard: tools reach public addresses only, unless an operator allowlisted the host."""

import json

import pytest

from agents.providers.openai_compatible import OpenAICompatibleProvider
from platform_site import outbound
from platform_site.outbound import OutboundBlocked
from tests.support.servers import petstore  # noqa: F401 (fixture
from tests.unit.tools.test_outbound_guard import no_allowlist  # noqa: F401 (a fixture)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.mark.parametrize(
    "host,reason",
    [
        ("127.0.0.1", "loopback"),
        ("[::1]", "loopback"),
        ("localhost", "loopback"),  # a name that resolves to loopback
        ("[::ffff:127.0.0.1]", "loopback"),  # IPv4-mapped IPv6
        ("10.0.0.1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("0.0.0.0", "unspecified"),
    ],
)
def test_internal_addresses_are_refused_before_connecting(no_allowlist, petstore, host, reason):
    before = len(petstore.requests)
    # On loopback the port is the live test server's: had the guard let the call through, it would be recorded.
    with pytest.raises(OutboundBlocked) as refused:
        outbound.guarded_request("GET", f"http://{host}:{_port(petstore.base_url)}/pets", timeout_seconds=2)
    assert reason in refused.value.detail
    assert "AGENTRY_OUTBOUND_ALLOWLIST" in refused.value.detail
    assert len(petstore.requests) == before


def test_allowlisted_host_and_port_is_reachable(settings, petstore):
    settings.AGENTRY_OUTBOUND_ALLOWLIST = [f"127.0.0.1:{_port(petstore.base_url)}"]
    fetched = outbound.guarded_request("GET", f"{petstore.base_url}/pets/1")
    assert fetched.response.status_code == 200 and b"Rex" in fetched.body
    # The entry names one port; the same host on another port stays closed.
    with pytest.raises(OutboundBlocked):
        outbound.guarded_request("GET", "http://127.0.0.1:9/", timeout_seconds=2)


def test_redirect_to_loopback_is_refused(settings, petstore):
    port = _port(petstore.base_url)
    settings.AGENTRY_OUTBOUND_ALLOWLIST = [f"127.0.0.1:{port}"]
    before = len(petstore.requests)
    with pytest.raises(OutboundBlocked) as refused:
        outbound.guarded_request("GET", f"{petstore.base_url}/redirect?to=http://localhost:{port}/pets/1")
    assert "localhost (127.0.0.1)" in refused.value.detail
    assert petstore.paths()[before:] == ["/redirect"]


def test_redirects_are_followed_and_secrets_stay_on_their_origin(settings, petstore):
    port = _port(petstore.base_url)
    settings.AGENTRY_OUTBOUND_ALLOWLIST = [f"127.0.0.1:{port}", f"localhost:{port}"]
    fetched = outbound.guarded_request(
        "GET",
        f"{petstore.base_url}/redirect?to=http://localhost:{port}/echo-headers",
        headers={"X-Api-Key": "s3cret", "X-Plain": "yes"},
        secret_headers=("X-Api-Key",),
    )
    assert fetched.response.status_code == 200
    assert json.loads(fetched.body) == {"x-plain": "yes"}


def test_redirect_loops_stop(settings, petstore):
    settings.AGENTRY_OUTBOUND_ALLOWLIST = ["127.0.0.1"]
    with pytest.raises(OutboundBlocked, match="Stopped after 2 redirects"):
        outbound.guarded_request("GET", f"{petstore.base_url}/loop", max_redirects=2)


def test_model_provider_traffic_is_allowed_explicitly(no_allowlist, fake_llm):
    # The operator-configured model endpoint on loopback works with an empty allowlist.
    model = {"base_url": fake_llm.api_base, "model": "echo", "read_timeout_seconds": 10, "connect_timeout_seconds": 5}
    response = OpenAICompatibleProvider().send(
        model=model,
        api_key="",
        body={"model": "echo", "messages": [{"role": "user", "content": "ping"}]},
    )
    assert response.content == "ping"
