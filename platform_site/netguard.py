"""Which addresses outbound calls made on a model's behalf may reach.

A tool URL can be steered by the model (a fetch tool, a path parameter, a redirect), so a
call must not become a way into the network behind the server: loopback, private,
link-local (cloud metadata at 169.254.169.254), shared, reserved and multicast addresses are
refused unless an operator allowlisted the host (AGENTRY_OUTBOUND_ALLOWLIST for tools and MCP
servers, AGENTRY_WEBHOOK_ALLOWLIST for webhooks).

The check runs inside the connection itself (the network backends below): the name is
resolved once, every address it resolves to is checked, and the socket connects to the
checked address. There is no second lookup for a rebinding DNS server to answer differently,
while TLS still verifies the certificate against the host name.
"""

import ipaddress
import socket
from collections.abc import Iterable

import anyio
import httpcore
import httpcore2
from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# NAT64 (RFC 6052) embeds an IPv4 address that a gateway would then reach.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class OutboundBlocked(Exception):
    """The destination is not one a tool may reach.

    `message` is safe to show to a model: it names the host it was given and nothing the
    resolver answered, so a refusal cannot be used to map the internal network. `detail` is
    for the operator (logs, the ledger's error column): the address and why it was refused.
    `retryable`: the name could not be resolved, which a resolver that is down or slow causes
    as often as a wrong name; a caller that retries network errors (webhooks) retries this too.
    """

    def __init__(self, message: str, detail: str = "", *, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.detail = detail or message
        self.retryable = retryable


def _embedded_ipv4(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def refusal_reason(address: Address) -> str | None:
    """Why a tool may not connect to this address, or None when it may."""
    address = _embedded_ipv4(address)
    if isinstance(address, ipaddress.IPv6Address) and address.teredo is not None:
        return "a Teredo tunnel address"
    checks = [
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address (where cloud metadata services answer)"),
        ("is_multicast", "a multicast address"),
        ("is_unspecified", "an unspecified address"),
        ("is_private", "a private-network address"),
        ("is_reserved", "a reserved address"),
    ]
    for attribute, reason in checks:
        if getattr(address, attribute):
            return reason
    if not address.is_global:
        return "a non-public address"
    return None


def _normalise_host(host: str) -> str:
    return host.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")


def _allowed(host: str, port: int, allowlist: Iterable[str]) -> bool:
    host = _normalise_host(host)
    for entry in allowlist:
        entry = entry.strip().lower()
        if entry.startswith("["):  # [v6]:port or [v6]
            entry_host, _, rest = entry[1:].partition("]")
            entry_port = rest.removeprefix(":")
        elif entry.count(":") == 1:
            entry_host, entry_port = entry.split(":")
        else:
            entry_host, entry_port = entry, ""
        if _normalise_host(entry_host) == host and (not entry_port or entry_port == str(port)):
            return True
    return False


def _describe(host: str, address: str) -> str:
    return host if host == address else f"{host} ({address})"


def _not_allowed(host: str, detail: str, *, retryable: bool = False) -> OutboundBlocked:
    # One answer whether the name is internal or unknown: telling them apart would let a model
    # probe which internal names exist.
    return OutboundBlocked(
        f"Cannot connect to {host}: the host is not allowed or could not be found.", detail, retryable=retryable
    )


def checked_addresses(
    host: str, port: int, infos: Iterable[tuple], *, setting: str = "AGENTRY_OUTBOUND_ALLOWLIST"
) -> list[str]:
    """The resolved addresses of host, or OutboundBlocked if any of them is refused.

    All must pass: a name that resolves to one public and one internal address could
    otherwise be used to reach the internal one on a retry or a rebinding.
    """
    addresses = []
    for info in infos:
        address = info[4][0].split("%", 1)[0]  # drop an IPv6 zone id
        reason = refusal_reason(ipaddress.ip_address(address))
        if reason:
            raise _not_allowed(
                host,
                (
                    f"Refused to connect to {_describe(host, address)}: it is {reason}, which outbound calls may "
                    f"not reach. An operator can allow the host in {setting}."
                ),
            )
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise _not_allowed(host, f"The host {host} did not resolve to any address.", retryable=True)
    return addresses


def _resolve(host: str, port: int) -> list[tuple]:
    try:
        return socket.getaddrinfo(_normalise_host(host), port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise _not_allowed(host, f"The host {host} could not be resolved: {exc.strerror}.", retryable=True) from exc


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, connecting only to checked addresses.

    `setting` names the allowlist (a list of strings in Django settings) read at each connect,
    so a change of settings applies to pooled clients too."""

    def __init__(self, setting: str = "AGENTRY_OUTBOUND_ALLOWLIST"):
        self._backend = httpcore.SyncBackend()
        self._setting = setting

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        if _allowed(host, port, getattr(settings, self._setting)):
            return self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        addresses = checked_addresses(host, port, _resolve(host, port), setting=self._setting)
        last_error = None
        for address in addresses:
            try:
                return self._backend.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                last_error = exc
        raise last_error

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise OutboundBlocked("Unix sockets are not reachable from tools.")

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _GuardedAnyIO:
    """The same guard for an async httpcore: `_httpcore` is the module (httpcore or httpcore2)."""

    _httpcore = httpcore2

    def __init__(self):
        self._backend = self._httpcore.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        if _allowed(host, port, settings.AGENTRY_OUTBOUND_ALLOWLIST):
            return await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        infos = await anyio.to_thread.run_sync(_resolve, host, port)
        addresses = checked_addresses(host, port, infos)
        last_error = None
        for address in addresses:
            try:
                return await self._backend.connect_tcp(address, port, timeout, local_address, socket_options)
            except self._httpcore.ConnectError as exc:
                last_error = exc
        raise last_error

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise OutboundBlocked("Unix sockets are not reachable from tools.")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class GuardedAsyncBackend(_GuardedAnyIO, httpcore2.AsyncNetworkBackend):
    """For httpcore2 (under httpx2, which the MCP SDK's HTTP transport uses)."""


class GuardedHttpxAsyncBackend(_GuardedAnyIO, httpcore.AsyncNetworkBackend):
    """For httpcore (under httpx's AsyncClient, which the A2A SDK's client uses)."""

    _httpcore = httpcore
