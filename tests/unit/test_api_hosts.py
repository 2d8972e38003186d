"""Host names, origins and forwarded addresses, parsed rather than compared as text."""

from __future__ import annotations

import pytest

from agentflow.api.hosts import (
    LOOPBACK_NAMES,
    forwarded_client,
    host_matches,
    is_loopback,
    normalise_origin,
    parse_networks,
    same_origin,
    split_host,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("LOCALHOST.", ("localhost", None)),
        ("[::1]:8000", ("::1", 8000)),
        ("api.example.com", ("api.example.com", None)),
        ("", None),
        ("user@127.0.0.1", None),
        ("127.0.0.1:99999", None),
        ("a b", None),
        ("evil.example/x", None),
        ("[::1", None),
    ],
)
def test_split_host(value: str, expected: tuple[str, int | None] | None) -> None:
    assert split_host(value) == expected


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("127.0.0.1.evil.example", False),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("localhost.evil.example", False),
    ],
)
def test_loopback_is_judged_on_the_parsed_address(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_host_patterns() -> None:
    assert host_matches("127.9.9.9", LOOPBACK_NAMES)
    assert host_matches("::1", LOOPBACK_NAMES)
    assert not host_matches("evil.example", LOOPBACK_NAMES)
    assert not host_matches("127.0.0.1.evil.example", LOOPBACK_NAMES)
    assert host_matches("a.example.com", ["*.example.com"])
    assert host_matches("a.b.example.com", ["*.example.com"])
    assert not host_matches("example.com", ["*.example.com"])
    assert not host_matches("evilexample.com", ["*.example.com"])
    assert host_matches("10.0.0.5", ["10.0.0.5"])
    assert host_matches("anything", ["*"])


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
        ("http://localhost:8000", "localhost:8000", True),
        ("https://api.example.com", "api.example.com", True),  # default port, TLS at a proxy
        ("http://api.example.com", "api.example.com:80", True),
        ("http://[::1]:8000", "[::1]:8000", True),
        ("http://127.0.0.1:3000", "127.0.0.1:8000", False),
        ("http://evil.example", "127.0.0.1:8000", False),
        ("http://localhost:8000", "127.0.0.1:8000", False),  # another origin, same machine
        ("null", "127.0.0.1:8000", False),
        ("file://", "127.0.0.1:8000", False),
        ("http://evil.example:8000", "evil.example:8000", True),  # rebinding: the Host check stops it
    ],
)
def test_same_origin(origin: str, host: str, same: bool) -> None:
    assert same_origin(origin, host) is same


def test_normalise_origin() -> None:
    assert normalise_origin("HTTPS://Console.Example.com:443/") == "https://console.example.com"
    assert normalise_origin("http://localhost:3000") == "http://localhost:3000"
    for bad in ("console.example.com", "https://x.com/path", "ftp://x.com", "https://u@x.com"):
        with pytest.raises(ValueError, match="origin"):
            normalise_origin(bad)


def test_forwarded_client_believes_only_trusted_proxies() -> None:
    trusted = parse_networks(["127.0.0.1", "10.0.0.0/8"], "AGENTFLOW_TRUSTED_PROXIES")
    chain = {"x-forwarded-for": "127.0.0.1, 203.0.113.9, 10.1.1.1"}
    assert forwarded_client("127.0.0.1", chain, trusted) == "203.0.113.9"  # the right-most untrusted hop
    assert forwarded_client("192.0.2.7", chain, trusted) is None  # not a proxy of ours
    assert forwarded_client("127.0.0.1", {"x-forwarded-for": "10.1.1.1"}, trusted) is None
    assert forwarded_client("127.0.0.1", {}, trusted) is None
    assert forwarded_client(None, chain, trusted) is None
