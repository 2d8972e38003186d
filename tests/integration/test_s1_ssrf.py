"""S1 (RELIABILITY.md): the guarded HTTP client refuses every SSRF destination by default.

A matrix of URLs (loopback, private, link-local, metadata, CGNAT, multicast, reserved, odd
encodings, IPv6 forms, hostnames resolving inside, redirects from an allowed server, a mixed
DNS answer) goes through ``guarded_client()``. Pass: 100% refused, and the recording servers
listening on 127.0.0.1 and ::1 received nothing.

Negative controls show the test can fail: the same loopback URLs through a plain
``httpx.AsyncClient`` do reach the recording server, and a "check, then connect by name"
client falls for DNS rebinding where the guarded client does not.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import anthropic
import httpx
import httpx2
import openai
import pytest

from agentflow.integrations import BlockedDestination, guarded_client, guarded_sdk_client
from tests.support.target_server import Reply, TargetServer


class ScriptedResolver:
    """An injected resolver: ``answers[host]`` per call (the last answer repeats); others fail."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        script = self.answers.get(host)
        if script is None:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not in the test's DNS")
        return script[min(self.calls.count(host), len(script)) - 1]


DNS = {
    "loop.test": [["127.0.0.1"]],
    "internal.test": [["10.0.0.5"]],
    "router.test": [["192.168.1.1"]],
    "meta.test": [["169.254.169.254"]],
    "metadata.google.internal": [["169.254.169.254"]],
    "v6loop.test": [["::1"]],
    "mapped.test": [["::ffff:127.0.0.1"]],
    "ula.test": [["fd00::1"]],
    "cgnat.test": [["100.64.1.1"]],
    "127.0.0.1.nip.io": [["127.0.0.1"]],
    "mixed.test": [["93.184.216.34", "127.0.0.1"]],
    "mixed6.test": [["2606:2800:220:1:248:1893:25c8:1946", "fe80::1"]],
    "redirector.test": [["127.0.0.2"]],
}


@dataclass(frozen=True)
class Case:
    """One URL; ``{p}`` is the recording servers' port, ``{r}`` the redirector's base URL."""

    id: str
    url: str
    parser_refuses: bool = False  # httpx's own URL parser refuses it before any connection
    reaches_unguarded: bool = False  # a plain client does reach the recording server


CASES = [
    # Loopback, plain and encoded
    Case("v4-loopback", "http://127.0.0.1:{p}/", reaches_unguarded=True),
    Case("v4-loopback-2", "http://127.0.0.2:{p}/"),
    Case("v4-loopback-top", "http://127.255.255.254:{p}/"),
    Case("decimal", "http://2130706433:{p}/", reaches_unguarded=True),
    Case("hex-whole", "http://0x7f000001:{p}/", reaches_unguarded=True),
    Case("octal-whole", "http://017700000001:{p}/", reaches_unguarded=True),
    Case("octal-dotted", "http://0177.0.0.1:{p}/", parser_refuses=True),
    Case("octal-short", "http://0177.1:{p}/", reaches_unguarded=True),
    Case("hex-dotted", "http://0x7f.0.0.1:{p}/", reaches_unguarded=True),
    Case("hex-short", "http://0x7f.1:{p}/", reaches_unguarded=True),
    Case("mixed-radix", "http://0x7F.0X0.0.01:{p}/"),
    Case("short-2", "http://127.1:{p}/", reaches_unguarded=True),
    Case("short-3", "http://127.0.1:{p}/", reaches_unguarded=True),
    Case("zero-padded", "http://127.000.000.001:{p}/", parser_refuses=True),
    Case("percent-encoded", "http://%31%32%37.0.0.1:{p}/"),
    Case("trailing-dot", "http://127.0.0.1.:{p}/"),
    Case("fullwidth-dots", "http://127。0。0。1:{p}/", reaches_unguarded=True),
    Case("userinfo", "http://evil.example@127.0.0.1:{p}/", reaches_unguarded=True),
    Case("userinfo-fragment", "http://127.0.0.1:{p}#@evil.example/", reaches_unguarded=True),
    Case("localhost", "http://localhost:{p}/", reaches_unguarded=True),
    Case("localhost-dot", "http://localhost.:{p}/"),
    Case("localhost-upper", "http://LOCALHOST:{p}/", reaches_unguarded=True),
    Case("sub-localhost", "http://api.localhost:{p}/"),
    # IPv6 loopback and IPv4-in-IPv6 forms
    Case("v6-loopback", "http://[::1]:{p}/", reaches_unguarded=True),
    Case("v6-loopback-long", "http://[0:0:0:0:0:0:0:1]:{p}/", reaches_unguarded=True),
    Case("v4-mapped", "http://[::ffff:127.0.0.1]:{p}/", reaches_unguarded=True),
    Case("v4-mapped-hex", "http://[::ffff:7f00:1]:{p}/", reaches_unguarded=True),
    Case("v4-mapped-long", "http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/", reaches_unguarded=True),
    Case("v4-compatible", "http://[::127.0.0.1]:{p}/"),
    Case("v4-translated", "http://[::ffff:0:127.0.0.1]:{p}/"),
    Case("nat64", "http://[64:ff9b::127.0.0.1]:{p}/"),
    Case("6to4", "http://[2002:7f00:1::]:{p}/"),
    Case("v6-unspecified", "http://[::]:{p}/"),
    # Unspecified
    Case("zero", "http://0.0.0.0:{p}/"),
    Case("zero-short", "http://0:{p}/"),
    # Private
    Case("rfc1918-10", "http://10.0.0.1/"),
    Case("rfc1918-172", "http://172.16.0.1/"),
    Case("rfc1918-172-top", "http://172.31.255.254/"),
    Case("rfc1918-192", "http://192.168.1.1/"),
    Case("rfc1918-decimal", "http://3232235777/"),
    Case("mapped-private", "http://[::ffff:10.0.0.1]/"),
    Case("ula", "http://[fc00::1]/"),
    Case("ula-fd", "http://[fd12:3456::1]/"),
    # Link-local and metadata
    Case("link-local", "http://169.254.0.1/"),
    Case("v6-link-local", "http://[fe80::1]/"),
    Case("v6-link-local-zone", "http://[fe80::1%25lo]/"),
    Case("metadata", "http://169.254.169.254/latest/meta-data/"),
    Case("metadata-decimal", "http://2852039166/latest/meta-data/"),
    Case("metadata-hex", "http://0xa9fea9fe/latest/meta-data/"),
    Case("metadata-mapped", "http://[::ffff:169.254.169.254]/"),
    Case("metadata-v6", "http://[fd00:ec2::254]/latest/meta-data/"),
    Case("metadata-ecs", "http://169.254.170.2/v2/credentials"),
    Case("metadata-alibaba", "http://100.100.100.200/latest/meta-data/"),
    Case("azure-wireserver", "http://168.63.129.16/machine"),
    # CGNAT, multicast, reserved, broadcast
    Case("cgnat", "http://100.64.0.1/"),
    Case("cgnat-top", "http://100.127.255.254/"),
    Case("multicast", "http://224.0.0.1/"),
    Case("multicast-ssdp", "http://239.255.255.250:1900/"),
    Case("v6-multicast", "http://[ff02::1]/"),
    Case("broadcast", "http://255.255.255.255/"),
    Case("reserved", "http://240.0.0.1/"),
    Case("benchmarking", "http://198.18.0.1/"),
    Case("malformed-five-parts", "http://1.2.3.4.5/"),
    # Schemes
    Case("file", "file:///etc/passwd"),
    Case("gopher", "gopher://127.0.0.1:{p}/_GET%20/"),
    Case("ftp", "ftp://127.0.0.1:{p}/"),
    # Names that resolve inside (injected resolver)
    Case("dns-loopback", "http://loop.test:{p}/"),
    Case("dns-private", "http://internal.test/"),
    Case("dns-router", "http://router.test/"),
    Case("dns-metadata", "http://meta.test/"),
    Case("dns-gcp-metadata", "http://metadata.google.internal/computeMetadata/v1/"),
    Case("dns-v6-loopback", "http://v6loop.test:{p}/"),
    Case("dns-mapped", "http://mapped.test:{p}/"),
    Case("dns-ula", "http://ula.test/"),
    Case("dns-cgnat", "http://cgnat.test/"),
    Case("dns-nip-io", "http://127.0.0.1.nip.io:{p}/"),
    Case("dns-mixed", "http://mixed.test:{p}/"),
    Case("dns-mixed-v6", "http://mixed6.test/"),
    # Redirects from an allowed server (redirector.test) into forbidden places
    Case("redirect-loopback", "{r}/to-victim", reaches_unguarded=True),
    Case("redirect-metadata", "{r}/to-metadata"),
    Case("redirect-localhost-307", "{r}/to-localhost"),
    Case("redirect-decimal", "{r}/to-decimal"),
    Case("redirect-v6", "{r}/to-v6"),
    Case("redirect-file", "{r}/to-file"),
    Case("redirect-chain", "{r}/hop"),
]


@pytest.fixture
def servers() -> Iterator[tuple[TargetServer, TargetServer, TargetServer]]:
    """The recording victims (127.0.0.1 and ::1, one port) and the redirector on 127.0.0.2."""
    with (
        TargetServer("127.0.0.1") as victim,
        TargetServer("::1", victim.port) as victim6,
        TargetServer("127.0.0.2") as redirector,
    ):
        p = victim.port
        for path, status, location in [
            ("/to-victim", 302, f"http://127.0.0.1:{p}/"),
            ("/to-metadata", 302, "http://169.254.169.254/latest/meta-data/iam/"),
            ("/to-localhost", 307, f"http://localhost:{p}/"),
            ("/to-decimal", 301, f"http://2130706433:{p}/"),
            ("/to-v6", 308, f"http://[::1]:{p}/"),
            ("/to-file", 302, "file:///etc/passwd"),
            ("/hop", 302, "/to-victim"),
        ]:
            redirector.route(path, Reply(status, headers={"Location": location}, body=b""))
        yield victim, victim6, redirector


def _url(case: Case, port: int, redirector: TargetServer) -> str:
    return case.url.format(p=port, r=f"http://redirector.test:{redirector.port}")


def _blocked_properly(exc: BlockedDestination) -> bool:
    """The refusal carries the stable code, no retry, and tells a person how to open it."""
    solution = exc.info.solution or ""
    return (
        exc.info.code == "destination_blocked"
        and exc.retryable is False
        and "AGENTFLOW_HTTP_ALLOW" in solution
    )


async def _attempt(client: httpx.AsyncClient | httpx2.AsyncClient, url: str) -> str:
    """Send one GET; return how it ended: ``blocked``, ``invalid_url`` or ``reached <status>``."""
    try:
        response = await client.get(url)
    except BlockedDestination as exc:
        return "blocked" if _blocked_properly(exc) else f"blocked without code or hint: {exc}"
    except (httpx.InvalidURL, httpx2.InvalidURL):
        return "invalid_url"
    except (httpx.HTTPError, httpx2.HTTPError) as exc:
        return f"failed {type(exc).__name__}"
    return f"reached {response.status_code}"


@pytest.mark.parametrize("flavour", ["httpx", "httpx2"])
async def test_s1_matrix_refused_by_default(
    servers: tuple[TargetServer, TargetServer, TargetServer], flavour: str
) -> None:
    """Both flavours: ``guarded_client`` (httpx) and ``guarded_sdk_client`` (httpx2, for SDKs)."""
    victim, victim6, redirector = servers
    resolver = ScriptedResolver(DNS)
    outcomes: dict[str, str] = {}
    make = guarded_client if flavour == "httpx" else guarded_sdk_client
    async with (
        make(resolver=resolver, timeout=5) as default,
        make(allow=["redirector.test"], resolver=resolver, timeout=5) as via_redirector,
    ):
        for case in CASES:
            client = via_redirector if case.url.startswith("{r}") else default
            outcomes[case.id] = await _attempt(client, _url(case, victim.port, redirector))

    expected = {c.id: "invalid_url" if c.parser_refuses else "blocked" for c in CASES}
    wrong = {k: v for k, v in outcomes.items() if v != expected[k]}
    refused = sum(1 for v in outcomes.values() if v in ("blocked", "invalid_url"))
    redirects_served = [r.path for r in redirector.received]
    verdict = {
        "test": "S1",
        "client": flavour,
        "refused": refused,
        "total": len(CASES),
        "blocked_by_guard": sum(1 for v in outcomes.values() if v == "blocked"),
        "refused_by_url_parser": sum(1 for v in outcomes.values() if v == "invalid_url"),
        "reached_victims": len(victim.received) + len(victim6.received),
        "resolver_lookups": len(resolver.calls),
    }
    print(json.dumps(verdict))
    assert wrong == {}, wrong
    assert refused == len(CASES) >= 70
    assert victim.received == [] and victim6.received == []
    # The redirector served each redirect case once (the chain twice), and nothing else.
    assert sorted(redirects_served) == sorted(
        [
            "/to-victim",
            "/to-metadata",
            "/to-localhost",
            "/to-decimal",
            "/to-v6",
            "/to-file",
            "/hop",
            "/to-victim",
        ]
    )


async def test_s1_negative_control_unguarded_client_reaches_the_victim(
    servers: tuple[TargetServer, TargetServer, TargetServer],
) -> None:
    """Without the guard the same loopback URLs do land on the recording servers."""
    victim, victim6, redirector = servers
    cases = [c for c in CASES if c.reaches_unguarded]
    missed = []
    transport = httpx.AsyncHTTPTransport()
    async with httpx.AsyncClient(
        transport=transport, follow_redirects=True, trust_env=False, timeout=5
    ) as plain:
        for case in cases:
            before = len(victim.received) + len(victim6.received)
            url = _url(case, victim.port, redirector).replace("redirector.test", "127.0.0.2")
            outcome = await _attempt(plain, url)
            if len(victim.received) + len(victim6.received) != before + 1:
                missed.append((case.id, outcome))
    print(
        json.dumps({"test": "S1-negative-control", "reached": len(cases) - len(missed), "total": len(cases)})
    )
    assert missed == [], (
        f"these no longer reach the victim unguarded, so S1 proves nothing for them: {missed}"
    )


async def test_s1_dns_rebinding_connects_to_the_checked_address() -> None:
    """The resolver answers an allowed address first, then 127.0.0.1: exactly one lookup
    happens and the connection goes to the first answer."""
    with TargetServer("127.0.0.2") as checked, TargetServer("127.0.0.1", checked.port) as victim:
        resolver = ScriptedResolver({"rebind.test": [["127.0.0.2"], ["127.0.0.1"]]})
        async with guarded_client(allow=["127.0.0.2"], resolver=resolver) as client:
            response = await client.get(f"http://rebind.test:{checked.port}/")
            assert response.status_code == 200
            assert resolver.calls == ["rebind.test"]
            assert len(checked.received) == 1 and victim.received == []
            # The kept-alive connection is reused without a lookup; this answer closes it.
            await client.get(f"http://rebind.test:{checked.port}/", headers={"Connection": "close"})
            assert resolver.calls == ["rebind.test"] and len(checked.received) == 2
            # A new connection is checked anew, and the rebound answer is refused.
            with pytest.raises(BlockedDestination, match=r"rebind\.test.*127\.0\.0\.1 is loopback"):
                await client.get(f"http://rebind.test:{checked.port}/")
        assert resolver.calls == ["rebind.test", "rebind.test"]
        assert victim.received == []


class _CheckThenConnectByName(httpx.AsyncBaseTransport):
    """The naive guard: check the name's addresses, then let the connection look it up again."""

    def __init__(self, resolver: ScriptedResolver) -> None:
        self._resolver = resolver
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        checked = await self._resolver(request.url.host, request.url.port or 80)
        assert checked == ["127.0.0.2"], "the check itself passes"
        second = await self._resolver(request.url.host, request.url.port or 80)  # the connect's lookup
        return await self._inner.handle_async_request(
            httpx.Request(request.method, request.url.copy_with(host=second[0]), headers=request.headers)
        )


async def test_s1_negative_control_second_lookup_falls_for_rebinding() -> None:
    with TargetServer("127.0.0.2") as checked, TargetServer("127.0.0.1", checked.port) as victim:
        resolver = ScriptedResolver({"rebind.test": [["127.0.0.2"], ["127.0.0.1"]]})
        async with httpx.AsyncClient(transport=_CheckThenConnectByName(resolver)) as naive:
            await naive.get(f"http://rebind.test:{checked.port}/")
        assert len(victim.received) == 1, (
            "the naive client must reach the victim, or the test above proves nothing"
        )


async def test_s1_sdks_handed_the_client_are_guarded(
    servers: tuple[TargetServer, TargetServer, TargetServer],
) -> None:
    """Model SDKs send through the client they are given: refused, reported as their connection
    error, with our BlockedDestination as the cause. OpenAI's takes either flavour; Anthropic's
    takes only httpx2, hence guarded_sdk_client."""
    victim, victim6, _ = servers
    base = f"http://127.0.0.1:{victim.port}"
    causes: list[BaseException | None] = []
    async with guarded_client() as httpx_client, guarded_sdk_client() as sdk_client:
        for client in (httpx_client, sdk_client):
            oai = openai.AsyncOpenAI(
                api_key="sk-test", base_url=f"{base}/v1", http_client=client, max_retries=0
            )
            with pytest.raises(openai.APIConnectionError) as oai_error:
                await oai.models.list()
            causes.append(oai_error.value.__cause__)
        ant = anthropic.AsyncAnthropic(
            api_key="sk-test", base_url=base, http_client=sdk_client, max_retries=0
        )
        with pytest.raises(anthropic.APIConnectionError) as ant_error:
            await ant.messages.create(
                model="claude-test", max_tokens=1, messages=[{"role": "user", "content": "hi"}]
            )
        causes.append(ant_error.value.__cause__)
    assert [type(c) for c in causes] == [BlockedDestination] * 3
    assert all(isinstance(c, BlockedDestination) and c.request.url.port == victim.port for c in causes)
    assert victim.received == [] and victim6.received == []
    # Negative control: the same SDK call with a plain client reaches the victim.
    victim.route(
        "/v1/models",
        Reply(headers={"Content-Type": "application/json"}, body=b'{"object": "list", "data": []}'),
    )
    async with httpx2.AsyncClient(trust_env=False) as plain:
        oai = openai.AsyncOpenAI(api_key="sk-test", base_url=f"{base}/v1", http_client=plain, max_retries=0)
        await oai.models.list()
    assert [r.path for r in victim.received] == ["/v1/models"]


async def test_s1_sdk_client_checks_redirect_hops(
    servers: tuple[TargetServer, TargetServer, TargetServer],
) -> None:
    """The httpx2 client follows redirects itself; each hop still goes through the guard."""
    victim, victim6, redirector = servers
    resolver = ScriptedResolver(DNS)
    async with guarded_sdk_client(allow=["redirector.test"], resolver=resolver) as client:
        with pytest.raises(BlockedDestination, match=r"127\.0\.0\.1 is loopback"):
            await client.get(f"http://redirector.test:{redirector.port}/to-victim")
        ok = await client.get(f"http://redirector.test:{redirector.port}/plain")
    assert ok.status_code == 200 and ok.text == "ok"
    assert victim.received == [] and victim6.received == []
