"""Address classification, host-literal parsing, the allow-list and the destination guard (no I/O)."""

from __future__ import annotations

import socket
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from agentflow.core.errors import ConfigError
from agentflow.integrations.addresses import (
    Category,
    MalformedHost,
    classify_address,
    embedded_ipv4,
    normalize_host,
    parse_ip_literal,
)
from agentflow.integrations.allow_list import AllowList
from agentflow.integrations.destinations import DestinationGuard, ResolutionFailed
from agentflow.integrations.http_errors import BlockedDestination


@pytest.mark.parametrize(
    ("address", "category"),
    [
        ("127.0.0.1", Category.LOOPBACK),
        ("127.255.255.254", Category.LOOPBACK),
        ("::1", Category.LOOPBACK),
        ("10.0.0.1", Category.PRIVATE),
        ("172.16.0.1", Category.PRIVATE),
        ("172.31.255.255", Category.PRIVATE),
        ("192.168.0.1", Category.PRIVATE),
        ("fc00::1", Category.PRIVATE),
        ("fd12:3456::1", Category.PRIVATE),
        ("fec0::1", Category.PRIVATE),
        ("169.254.0.1", Category.LINK_LOCAL),
        ("fe80::1", Category.LINK_LOCAL),
        ("fe80::1%eth0", Category.LINK_LOCAL),
        ("169.254.169.254", Category.METADATA),
        ("169.254.170.2", Category.METADATA),
        ("fd00:ec2::254", Category.METADATA),
        ("100.100.100.200", Category.METADATA),
        ("168.63.129.16", Category.METADATA),
        ("100.64.0.1", Category.SHARED),
        ("100.127.255.255", Category.SHARED),
        ("224.0.0.1", Category.MULTICAST),
        ("239.255.255.250", Category.MULTICAST),
        ("ff02::1", Category.MULTICAST),
        ("0.0.0.0", Category.UNSPECIFIED),
        ("0.1.2.3", Category.UNSPECIFIED),
        ("::", Category.UNSPECIFIED),
        ("255.255.255.255", Category.RESERVED),
        ("240.0.0.1", Category.RESERVED),
        ("192.0.2.1", Category.RESERVED),
        ("198.18.0.1", Category.RESERVED),
        ("2001:db8::1", Category.RESERVED),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Category.RESERVED),  # Teredo
        ("100::1", Category.RESERVED),
        ("4000::1", Category.RESERVED),  # outside 2000::/3
        # IPv4 embedded in IPv6: judged by the embedded address
        ("::ffff:127.0.0.1", Category.LOOPBACK),
        ("::ffff:7f00:1", Category.LOOPBACK),
        ("::ffff:169.254.169.254", Category.METADATA),
        ("::ffff:10.0.0.1", Category.PRIVATE),
        ("::127.0.0.1", Category.LOOPBACK),
        ("::ffff:0:127.0.0.1", Category.LOOPBACK),
        ("64:ff9b::127.0.0.1", Category.LOOPBACK),
        ("64:ff9b::a9fe:a9fe", Category.METADATA),
        ("64:ff9b:1::1", Category.PRIVATE),
        ("2002:7f00:1::", Category.LOOPBACK),
        ("2002:c0a8:101::1", Category.PRIVATE),
    ],
)
def test_non_public_addresses_are_classified(address: str, category: Category) -> None:
    verdict = classify_address(ip_address(address))
    assert verdict is not None and verdict.category is category, verdict


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "100.63.255.255",  # just below CGNAT
        "100.128.0.0",  # just above CGNAT
        "172.15.255.255",
        "172.32.0.0",
        "169.253.255.255",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert classify_address(ip_address(address)) is None


def test_verdict_names_the_embedded_form() -> None:
    verdict = classify_address(IPv6Address("::ffff:127.0.0.1"))
    assert verdict is not None and "IPv4-mapped form of 127.0.0.1" in verdict.reason
    assert embedded_ipv4(IPv6Address("::1")) is None  # IPv6's own loopback, not ::0.0.0.1
    assert embedded_ipv4(IPv6Address("2002:7f00:1::")) == (IPv4Address("127.0.0.1"), "6to4")


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0177.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),
        ("2852039166", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("10.1", "10.0.0.1"),
        ("192.168.257", "192.168.1.1"),
        ("::1", "::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("fe80::1%eth0", "fe80::1%eth0"),
    ],
)
def test_ip_literals_are_read_like_a_socket_reads_them(host: str, address: str) -> None:
    assert parse_ip_literal(host) == ip_address(address)


@pytest.mark.parametrize("host", ["example.com", "localhost", "127.0.0.1.nip.io", "0x7f.example", "a1"])
def test_names_are_not_literals(host: str) -> None:
    assert parse_ip_literal(host) is None


@pytest.mark.parametrize(
    "host", ["1.2.3.4.5", "256.0.0.1", "1.256.0.0.1", "08.0.0.1", "0x1.08", "1.2.3.4294967296"]
)
def test_numeric_looking_hosts_that_are_no_address_are_malformed(host: str) -> None:
    with pytest.raises(MalformedHost):
        parse_ip_literal(host)


@pytest.mark.parametrize(
    ("raw", "host"),
    [
        ("LOCALHOST", "localhost"),
        ("localhost.", "localhost"),
        ("%31%32%37.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("fe80::1%25eth0", "fe80::1%eth0"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ],
)
def test_hosts_are_normalized(raw: str, host: str) -> None:
    assert normalize_host(raw) == host


@pytest.mark.parametrize("raw", ["", ".", "a b", "evil.com/x", "%ff", "a..b", "host\x00"])
def test_malformed_hosts_are_refused(raw: str) -> None:
    with pytest.raises(MalformedHost):
        normalize_host(raw)


def _admits(entries: list[str], host: str, port: int, address: str) -> bool:
    ip = ip_address(address)
    verdict = classify_address(ip)
    assert verdict is not None
    return AllowList(entries).admits(host, port, ip, verdict)


@pytest.mark.parametrize(
    ("entries", "host", "port", "address", "admitted"),
    [
        (["127.0.0.1"], "127.0.0.1", 80, "127.0.0.1", True),
        (["127.0.0.1"], "127.0.0.1", 80, "127.0.0.2", False),
        (["127.0.0.0/8"], "x", 80, "127.9.9.9", True),
        (["10.0.0.0/8"], "x", 443, "10.1.2.3", True),
        (["10.0.0.0/8"], "x", 443, "192.168.1.1", False),
        (["127.0.0.1"], "x", 80, "::ffff:127.0.0.1", True),  # mapped form of an allowed address
        (["localhost"], "localhost", 80, "127.0.0.1", True),
        (["localhost"], "other", 80, "127.0.0.1", False),
        (["LocalHost."], "localhost", 80, "::1", True),
        (["127.0.0.1:8080"], "x", 8080, "127.0.0.1", True),
        (["127.0.0.1:8080"], "x", 8081, "127.0.0.1", False),
        (["localhost:11434"], "localhost", 11434, "127.0.0.1", True),
        (["[::1]:8080"], "x", 8080, "::1", True),
        (["[fd00::/8]:443"], "x", 443, "fd12::1", True),
        (["fd00::/8"], "x", 80, "fd12::1", True),
        # Metadata opens only for an entry naming the exact address
        (["169.254.0.0/16"], "x", 80, "169.254.169.254", False),
        (["0.0.0.0/0"], "x", 80, "169.254.169.254", False),
        (["meta.internal"], "meta.internal", 80, "169.254.169.254", False),
        (["169.254.169.254"], "x", 80, "169.254.169.254", True),
        (["169.254.0.0/16"], "x", 80, "169.254.1.1", True),
        ([], "x", 80, "127.0.0.1", False),
    ],
)
def test_allow_list(entries: list[str], host: str, port: int, address: str, admitted: bool) -> None:
    assert _admits(entries, host, port, address) is admitted


@pytest.mark.parametrize(
    "entry", ["10.0.0.0/33", "not a host", "127.0.0.1:0", "127.0.0.1:99999", "host:abc", "1.2.3.4.5"]
)
def test_allow_list_refuses_unreadable_entries(entry: str) -> None:
    with pytest.raises(ConfigError) as error:
        AllowList([entry])
    assert error.value.code == "http_allow_invalid" and entry in error.value.info.message


class _Resolver:
    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "unknown")
        return self.answers[host]


async def test_guard_resolves_once_and_refuses_a_mixed_answer() -> None:
    resolver = _Resolver({"public.test": ["93.184.216.34"], "mixed.test": ["93.184.216.34", "10.0.0.1"]})
    guard = DestinationGuard(AllowList(), resolver)
    assert await guard.check("public.test", 443) == [ip_address("93.184.216.34")]
    with pytest.raises(BlockedDestination) as error:
        await guard.check("mixed.test", 443)
    assert resolver.calls == ["public.test", "mixed.test"]
    assert error.value.info.details["address"] == "10.0.0.1"
    assert "mixed.test" in str(error.value) and "AGENTFLOW_HTTP_ALLOW" in str(error.value)


async def test_guard_never_asks_the_resolver_about_literals_or_localhost() -> None:
    resolver = _Resolver({"localhost": ["93.184.216.34"]})  # a lying resolver changes nothing
    guard = DestinationGuard(AllowList(), resolver)
    for host in ["0x7f.1", "localhost", "api.localhost", "[::1]"]:
        with pytest.raises(BlockedDestination):
            await guard.check(host, 80)
    assert resolver.calls == []


async def test_guard_reports_lookup_failures_apart_from_refusals() -> None:
    guard = DestinationGuard(AllowList(), _Resolver({"empty.test": [], "junk.test": ["not-an-ip"]}))
    for host in ["missing.test", "empty.test", "junk.test"]:
        with pytest.raises(ResolutionFailed):
            await guard.check(host, 80)
