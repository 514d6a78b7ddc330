"""The network guard: tools reach public addresses only, unless an operator allowlisted the host."""

import re
import socket

import pytest

from platform_site import outbound
from platform_site.outbound import OutboundBlocked


@pytest.fixture
def no_allowlist(settings):
    settings.AGENTRY_OUTBOUND_ALLOWLIST = []


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "/relative/path", "http://"])
def test_only_absolute_http_urls(url):
    with pytest.raises(OutboundBlocked, match="absolute http"):
        outbound.guarded_request("GET", url)


def test_a_name_with_any_internal_address_is_refused(no_allowlist, monkeypatch):
    # A resolver that answers with one public and one private address: connecting to the
    # public one now does not make the name safe, since the next connection may use the other.
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        if host == "mixed.example":
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 80)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", 80)),
            ]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    with pytest.raises(OutboundBlocked) as refused:
        outbound.guarded_request("GET", "http://mixed.example/")
    assert re.search(r"mixed.example \(10.1.2.3\).*private", refused.value.detail)
