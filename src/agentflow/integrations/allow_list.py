"""The operator's allow-list: which non-public destinations the guarded HTTP client may reach.

Entries (``AGENTFLOW_HTTP_ALLOW``, comma-separated) are host names (``localhost``,
``ollama.internal``), IP addresses (``127.0.0.1``, ``::1``), or CIDR ranges (``10.0.0.0/8``,
``fd00::/8``), each optionally with a port (``127.0.0.1:11434``, ``[::1]:8080``,
``[fd00::/8]:443``). A host-name entry trusts whatever that name resolves to; an address or
range entry opens the addresses it contains.

Cloud metadata addresses (169.254.169.254, fd00:ec2::254, ...) stay closed to names and
ranges: only an entry naming the exact address opens one, so ``169.254.0.0/16`` for a
link-local service does not hand out instance credentials by accident.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from ipaddress import IPv4Network, IPv6Network, ip_network

from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen
from agentflow.integrations.addresses import (
    Category,
    IPAddress,
    MalformedHost,
    Verdict,
    normalize_host,
    parse_ip_literal,
    unmapped,
)

_BRACKETED = re.compile(r"\[(?P<host>[^\]]+)\](?::(?P<port>[0-9]+))?")


@frozen
class AllowEntry:
    """One parsed entry: a host name or a network, and an optional port."""

    name: str | None
    network: IPv4Network | IPv6Network | None
    port: int | None

    def admits(self, host: str, port: int, address: IPAddress, verdict: Verdict) -> bool:
        """Whether this entry opens ``address`` (reached as ``host:port``)."""
        if self.port is not None and self.port != port:
            return False
        if verdict.category is Category.METADATA:
            return (
                self.network is not None
                and self.network.num_addresses == 1
                and unmapped(address) in self.network
            )
        if self.name is not None:
            return self.name == host
        assert self.network is not None
        return unmapped(address) in self.network


class AllowList:
    """Parsed allow-list entries.

    Args:
        entries: the entries, e.g. ``settings.http_allow_list``.

    Raises:
        ConfigError: code ``http_allow_invalid`` naming the entry that is not a host name,
            IP address or CIDR range.
    """

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.entries = tuple(parse_entry(entry) for entry in entries if entry.strip())

    def admits(self, host: str, port: int, address: IPAddress, verdict: Verdict) -> bool:
        """Whether some entry opens ``address``, refused by default for ``verdict``."""
        return any(entry.admits(host, port, address, verdict) for entry in self.entries)


def parse_entry(text: str) -> AllowEntry:
    """Parse one entry (see the module docstring for the forms).

    Raises:
        ConfigError: code ``http_allow_invalid``.
    """
    raw = text.strip()
    host, port = raw, None
    bracketed = _BRACKETED.fullmatch(raw)
    if bracketed:
        host = bracketed["host"]
        port = int(bracketed["port"]) if bracketed["port"] else None
    elif raw.count(":") == 1:  # two or more colons: an IPv6 address or range, no port
        host, _, port_text = raw.partition(":")
        port = int(port_text) if port_text.isdigit() else -1
    if port is not None and not 0 < port < 65536:
        raise _invalid(text, "the port must be a number from 1 to 65535")
    if "/" in host:
        try:
            return AllowEntry(None, ip_network(host, strict=False), port)
        except ValueError as exc:
            raise _invalid(text, str(exc)) from None
    try:
        name = normalize_host(host)
        address = parse_ip_literal(name)
    except MalformedHost as exc:
        raise _invalid(text, str(exc)) from None
    if address is not None:
        return AllowEntry(None, ip_network(unmapped(address)), port)
    return AllowEntry(name, None, port)


def _invalid(entry: str, why: str) -> ConfigError:
    return ConfigError(
        "http_allow_invalid",
        f"AGENTFLOW_HTTP_ALLOW entry {entry!r} is not a host, IP address or CIDR range: {why}",
        details={"entry": entry},
        solution="Use entries like 'localhost', '127.0.0.1', '10.0.0.0/8' or '127.0.0.1:8080'.",
    )
