"""What an outbound address really is: host literals as a socket would read them, and where they lead.

Pure functions, no I/O. The guarded HTTP client classifies every address it is about to
connect to; an address is *public* when none of the ranges below contains it. The ranges
are listed here, with a reason a person can read, instead of relying on
``ipaddress.is_global``/``is_private``, whose answers changed between Python versions
(3.11.4, 3.13) and which call multicast "global".

Host literals are parsed the way the C library's ``inet_aton`` (and the WHATWG URL
standard) reads them, because that is what a socket connects to: ``2130706433``,
``0177.0.0.1``, ``0x7f.1`` and ``127.1`` all mean 127.0.0.1.
"""

from __future__ import annotations

import re
from enum import StrEnum
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from urllib.parse import unquote

from agentflow.core.frozen import frozen

IPAddress = IPv4Address | IPv6Address


class Category(StrEnum):
    """Why an address is not public; the allow-list treats ``METADATA`` more strictly."""

    METADATA = "metadata"
    LOOPBACK = "loopback"
    PRIVATE = "private"
    LINK_LOCAL = "link_local"
    SHARED = "shared"
    MULTICAST = "multicast"
    UNSPECIFIED = "unspecified"
    RESERVED = "reserved"


@frozen
class Verdict:
    """Why an address is refused by default.

    Attributes:
        category: the kind of destination.
        reason: a phrase for people, e.g. ``"loopback (127.0.0.0/8)"``.
    """

    category: Category
    reason: str


# Cloud metadata and host-agent endpoints: the classic SSRF prize (instance credentials).
_METADATA: dict[IPAddress, str] = {
    IPv4Address("169.254.169.254"): "a cloud metadata service (AWS, GCP, Azure, OpenStack, ...)",
    IPv4Address("169.254.170.2"): "the AWS ECS task metadata service",
    IPv4Address("100.100.100.200"): "the Alibaba Cloud metadata service",
    IPv4Address("168.63.129.16"): "the Azure WireServer host endpoint",
    IPv6Address("fd00:ec2::254"): "the AWS metadata service (IPv6)",
}

_V4_RANGES: tuple[tuple[IPv4Network, Category, str], ...] = tuple(
    (IPv4Network(net), category, reason)
    for net, category, reason in (
        (
            "0.0.0.0/8",
            Category.UNSPECIFIED,
            "'this network' (0.0.0.0/8), which Linux connects to the local host",
        ),
        ("127.0.0.0/8", Category.LOOPBACK, "loopback (127.0.0.0/8)"),
        ("10.0.0.0/8", Category.PRIVATE, "private (RFC 1918, 10.0.0.0/8)"),
        ("172.16.0.0/12", Category.PRIVATE, "private (RFC 1918, 172.16.0.0/12)"),
        ("192.168.0.0/16", Category.PRIVATE, "private (RFC 1918, 192.168.0.0/16)"),
        ("169.254.0.0/16", Category.LINK_LOCAL, "link-local (169.254.0.0/16)"),
        ("100.64.0.0/10", Category.SHARED, "carrier-grade NAT shared space (100.64.0.0/10)"),
        ("224.0.0.0/4", Category.MULTICAST, "multicast (224.0.0.0/4)"),
        ("240.0.0.0/4", Category.RESERVED, "reserved or broadcast (240.0.0.0/4)"),
        ("192.0.0.0/24", Category.RESERVED, "IETF protocol assignments (192.0.0.0/24)"),
        ("192.0.2.0/24", Category.RESERVED, "documentation (192.0.2.0/24)"),
        ("198.51.100.0/24", Category.RESERVED, "documentation (198.51.100.0/24)"),
        ("203.0.113.0/24", Category.RESERVED, "documentation (203.0.113.0/24)"),
        ("198.18.0.0/15", Category.RESERVED, "benchmarking (198.18.0.0/15)"),
        ("192.88.99.0/24", Category.RESERVED, "the deprecated 6to4 relay range (192.88.99.0/24)"),
    )
)

_V6_RANGES: tuple[tuple[IPv6Network, Category, str], ...] = tuple(
    (IPv6Network(net), category, reason)
    for net, category, reason in (
        ("::/128", Category.UNSPECIFIED, "unspecified (::), which Linux connects to the local host"),
        ("::1/128", Category.LOOPBACK, "loopback (::1)"),
        ("fc00::/7", Category.PRIVATE, "unique local (fc00::/7)"),
        ("fe80::/10", Category.LINK_LOCAL, "link-local (fe80::/10)"),
        ("fec0::/10", Category.PRIVATE, "site-local (fec0::/10)"),
        ("ff00::/8", Category.MULTICAST, "multicast (ff00::/8)"),
        ("64:ff9b:1::/48", Category.PRIVATE, "local-use NAT64 (64:ff9b:1::/48)"),
        ("100::/64", Category.RESERVED, "discard-only (100::/64)"),
        ("2001::/23", Category.RESERVED, "IETF protocol assignments, Teredo included (2001::/23)"),
        ("2001:db8::/32", Category.RESERVED, "documentation (2001:db8::/32)"),
    )
)

# Only 2000::/3 is allocated global unicast; anything else is reserved today.
_V6_GLOBAL_UNICAST = IPv6Network("2000::/3")

# IPv6 forms that carry an IPv4 address the packets end up at (or that a dual-stack socket
# turns into an IPv4 connection): the embedded address decides.
_V4_COMPATIBLE = IPv6Network("::/96")
_V4_TRANSLATED = IPv6Network("::ffff:0:0:0/96")
_NAT64 = IPv6Network("64:ff9b::/96")

_NUMBER_LABEL = re.compile(r"(0[xX][0-9a-fA-F]*|[0-9]+)")
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


class MalformedHost(ValueError):
    """A host that no resolver should be asked about (the message says why)."""


def normalize_host(raw: str) -> str:
    """Return the host a connection would really use: percent-decoded, lower case, no brackets.

    Browsers (WHATWG) percent-decode hosts, so ``%31%32%37.0.0.1`` is 127.0.0.1; one trailing
    dot (the DNS root) is dropped, so ``localhost.`` is ``localhost``.

    Raises:
        MalformedHost: empty, or characters no host name or IP literal may contain.
    """
    try:
        host = unquote(raw, errors="strict").strip().lower()
    except UnicodeDecodeError:
        raise MalformedHost(f"{raw!r} percent-decodes to invalid UTF-8") from None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.endswith(".") and not host.endswith(".."):
        host = host[:-1]
    if not host:
        raise MalformedHost("the URL has no host")
    if ":" in host:  # only an IPv6 literal has a colon here
        return host
    if not _HOST_NAME.fullmatch(host):
        raise MalformedHost(f"{raw!r} is not a valid host name")
    return host


def parse_ip_literal(host: str) -> IPAddress | None:
    """Read ``host`` (already normalized) as an IP address, in every form a socket accepts.

    Returns:
        The address, or None when ``host`` is a name to resolve.

    Raises:
        MalformedHost: the host ends in a number but is no valid IPv4 address
            (``1.2.3.4.5``, ``256.1.1.1``): WHATWG refuses those, and so do we.
    """
    if ":" in host:
        try:
            return IPv6Address(host)
        except ValueError:
            raise MalformedHost(f"{host!r} is not a valid IPv6 address") from None
    labels = host.split(".")
    if not _NUMBER_LABEL.fullmatch(labels[-1]):
        return None
    address = _parse_legacy_ipv4(labels)
    if address is None:
        raise MalformedHost(f"{host!r} ends in a number but is not a valid IPv4 address")
    return address


def _parse_legacy_ipv4(labels: list[str]) -> IPv4Address | None:
    """``inet_aton`` rules: 1-4 parts, each decimal, octal (leading 0) or hex (0x); the last
    part fills the remaining bytes."""
    if not 1 <= len(labels) <= 4:
        return None
    numbers: list[int] = []
    for label in labels:
        if not _NUMBER_LABEL.fullmatch(label):
            return None
        if label[:2].lower() == "0x":
            numbers.append(int(label[2:] or "0", 16))
        elif len(label) > 1 and label[0] == "0":
            if not set(label) <= set("01234567"):
                return None
            numbers.append(int(label, 8))
        else:
            numbers.append(int(label, 10))
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return IPv4Address(value)


def embedded_ipv4(address: IPv6Address) -> tuple[IPv4Address, str] | None:
    """The IPv4 address an IPv6 form carries, and the form's name; None when it carries none.

    ``::`` and ``::1`` are not IPv4-compatible forms: they are IPv6's own unspecified and
    loopback addresses.
    """
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "IPv4-mapped"
    if address.sixtofour is not None:
        return address.sixtofour, "6to4"
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF), "NAT64"
    if address in _V4_TRANSLATED:
        return IPv4Address(int(address) & 0xFFFFFFFF), "IPv4-translated"
    if address in _V4_COMPATIBLE and int(address) > 1:
        return IPv4Address(int(address) & 0xFFFFFFFF), "IPv4-compatible"
    return None


def classify_address(address: IPAddress) -> Verdict | None:
    """Say why ``address`` is not a public destination, or None when it is public.

    IPv6 forms that embed an IPv4 address (mapped ``::ffff:a.b.c.d``, compatible ``::a.b.c.d``,
    translated, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by that address.
    """
    if isinstance(address, IPv6Address):
        address = IPv6Address(int(address))  # drop a zone id (fe80::1%eth0): same address
        embedded = embedded_ipv4(address)
        if embedded is not None:
            inner, form = embedded
            verdict = classify_address(inner)
            if verdict is None:
                return None
            return Verdict(verdict.category, f"the {form} form of {inner}, {verdict.reason}")
    metadata = _METADATA.get(address)
    if metadata is not None:
        return Verdict(Category.METADATA, metadata)
    if isinstance(address, IPv4Address):
        for net4, category, reason in _V4_RANGES:
            if address in net4:
                return Verdict(category, reason)
        return None
    for net6, category, reason in _V6_RANGES:
        if address in net6:
            return Verdict(category, reason)
    if address not in _V6_GLOBAL_UNICAST:
        return Verdict(Category.RESERVED, "reserved IPv6 space (outside 2000::/3)")
    return None


def unmapped(address: IPAddress) -> IPAddress:
    """``::ffff:a.b.c.d`` as ``a.b.c.d`` (what a dual-stack socket connects to); else unchanged."""
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
