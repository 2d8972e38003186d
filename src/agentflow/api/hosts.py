"""Addresses and names as the HTTP layer sees them: loopback, ``Host``, ``Origin``, proxies.

Pure functions over strings, parsed with :mod:`ipaddress` and :mod:`urllib.parse`, never
compared as text prefixes (``127.0.0.1.evil.com`` is not loopback; ``::ffff:127.0.0.1``
and ``127.2.3.4`` are).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from agentflow.core.errors import ConfigError

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The names a loopback-only server answers to by default (any loopback address matches too)."""

FORWARDING_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
"""Headers a reverse proxy adds: a request carrying one did not come straight from its client."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_ip(text: str) -> IpAddress | None:
    """An IP address (``[::1]`` and zone-less forms included), or None when ``text`` is a name."""
    text = text.strip().removeprefix("[").removesuffix("]")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return address


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) means this machine only: a loopback address or
    ``localhost``. ``0.0.0.0``, ``::`` and other names are not loopback."""
    address = parse_ip(host)
    if address is not None:
        return address.is_loopback
    return host.strip().rstrip(".").lower() == "localhost"


def split_host(value: str) -> tuple[str, int | None] | None:
    """``Host`` header value -> ``(host, port)``; lower-case, no brackets, no trailing dot.

    Returns:
        None when the value is not a host (empty, a user part, a bad port, spaces...).
    """
    try:
        parts = urlsplit(f"//{value.strip()}")
        host, port = parts.hostname, parts.port
    except ValueError:  # a bad port or IPv6 literal
        return None
    if not host or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    if any(c.isspace() or c in "/\\@" for c in host):
        return None
    return host.rstrip("."), port


def host_matches(host: str, patterns: Iterable[str]) -> bool:
    """Whether ``host`` (from :func:`split_host`) is one of ``patterns``.

    A pattern is a name (``api.example.com``), ``*.example.com`` (any name under it), an IP
    address (``10.0.0.5``, ``::1``) or ``*`` (anything). ``localhost`` also admits every
    loopback address.
    """
    address = parse_ip(host)
    for raw in patterns:
        pattern = raw.strip().lower().rstrip(".")
        if pattern == "*":
            return True
        if pattern == "localhost" and (host == "localhost" or (address is not None and address.is_loopback)):
            return True
        wanted = parse_ip(pattern)
        if wanted is not None:
            if address == wanted:
                return True
        elif pattern.startswith("*."):
            if host.endswith(pattern[1:]) and host != pattern[2:]:
                return True
        elif host == pattern:
            return True
    return False


def same_origin(origin: str, host_header: str) -> bool:
    """Whether the browser's ``Origin`` names the host and port the request was sent to.

    A ``Host`` without a port matches an origin on its scheme's default port (the usual case
    behind a TLS-terminating proxy, where the scheme the server sees differs).
    """
    try:
        parts = urlsplit(origin)
        origin_host, origin_port = parts.hostname, parts.port
    except ValueError:
        return False
    if parts.scheme not in _DEFAULT_PORTS or not origin_host:
        return False
    target = split_host(host_header)
    if target is None:
        return False
    host, port = target
    origin_name = origin_host.rstrip(".")
    origin_ip, host_ip = parse_ip(origin_name), parse_ip(host)
    if origin_ip is not None or host_ip is not None:
        if origin_ip != host_ip:
            return False
    elif origin_name != host:
        return False
    origin_port = origin_port or _DEFAULT_PORTS[parts.scheme]
    return port == origin_port or (port is None and origin_port == _DEFAULT_PORTS[parts.scheme])


def normalise_origin(origin: str) -> str:
    """``scheme://host[:port]`` in lower case, the default port left out.

    Raises:
        ValueError: not an http(s) origin.
    """
    parts = urlsplit(origin.strip())
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"{origin!r} is not an origin such as https://app.example.com")
    if parts.query or parts.fragment or parts.username is not None:
        raise ValueError(f"{origin!r} is not an origin such as https://app.example.com")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = parts.port
    suffix = "" if port is None or port == _DEFAULT_PORTS[parts.scheme] else f":{port}"
    return f"{parts.scheme}://{host}{suffix}"


def parse_networks(entries: Iterable[str], setting: str) -> tuple[IpNetwork, ...]:
    """IP addresses and CIDR ranges (``10.0.0.0/8``, ``::1``).

    Raises:
        ConfigError: ``setting_invalid`` naming ``setting`` for an entry that is neither.
    """
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ConfigError(
                "setting_invalid",
                f"{setting}: {entry!r} is not an IP address or CIDR range",
                solution=f"List addresses or ranges, comma-separated: {setting}=127.0.0.1,10.0.0.0/8.",
            ) from None
    return tuple(networks)


def forwarded(headers: Mapping[str, str]) -> bool:
    """Whether a proxy relayed the request (it carries ``Forwarded``, ``X-Forwarded-For``...)."""
    return any(name in headers for name in FORWARDING_HEADERS)


def forwarded_client(
    peer: str | None, headers: Mapping[str, str], trusted: tuple[IpNetwork, ...]
) -> str | None:
    """The client of a request relayed by trusted proxies: the right-most ``X-Forwarded-For``
    entry that is not itself a trusted proxy.

    Entries left of it are the client's own claims and are ignored.

    Returns:
        None when ``peer`` is not a trusted proxy, or the header names no client.
    """
    if not _within(peer, trusted):
        return None
    hops = [hop.strip() for hop in headers.get("x-forwarded-for", "").split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _within(hop, trusted):
            return hop
    return None


def _within(value: str | None, networks: tuple[IpNetwork, ...]) -> bool:
    address = parse_ip(value) if value else None
    return address is not None and any(address in network for network in networks)
