"""The guarded HTTP client's positive paths and limits, against real local servers.

Companion of S1 (test_s1_ssrf.py, the refusals): an allow-listed destination is reachable,
the connection goes to the checked address while Host, SNI and certificate verification use
the host name, and the size and time limits hold (each limit test keeps a plain-client
control that shows the same server does get past an unguarded client).
"""

from __future__ import annotations

import datetime as dt
import gzip
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agentflow.core.errors import ConfigError
from agentflow.integrations import (
    BlockedDestination,
    RequestDeadlineExceeded,
    Resolver,
    ResponseTooLarge,
    guarded_client,
    guarded_sdk_client,
)
from tests.support.target_server import Reply, TargetServer

MiB = 1024 * 1024


def resolver_for(answers: dict[str, list[str]]) -> Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        return answers[host]

    return resolve


@pytest.fixture
def target() -> Iterator[TargetServer]:
    with TargetServer("127.0.0.1") as server:
        yield server


async def test_allow_listed_loopback_is_reachable(target: TargetServer) -> None:
    async with guarded_client(allow=["127.0.0.1"]) as client:
        response = await client.get(f"{target.url}/hello")
    assert (response.status_code, response.text) == (200, "ok")
    async with guarded_client(allow=["localhost"]) as client:
        assert (await client.get(f"http://localhost:{target.port}/by-name")).status_code == 200
    # An entry with another port does not open this one.
    async with guarded_client(allow=[f"127.0.0.1:{target.port + 1}"]) as client:
        with pytest.raises(BlockedDestination):
            await client.get(f"{target.url}/other-port")
    assert [r.path for r in target.received] == ["/hello", "/by-name"]


async def test_invalid_allow_entry_fails_fast() -> None:
    with pytest.raises(ConfigError) as error:
        guarded_client(allow=["10.0.0.0/33"])
    assert error.value.code == "http_allow_invalid" and "10.0.0.0/33" in error.value.info.message


async def test_host_header_kept_when_connecting_by_checked_address(target: TargetServer) -> None:
    resolve = resolver_for({"api.example.test": ["127.0.0.1"]})
    async with guarded_client(allow=["api.example.test"], resolver=resolve) as client:
        response = await client.post(f"http://api.example.test:{target.port}/v1/x", json={"a": 1})
    assert response.status_code == 200
    (received,) = target.received
    assert received.headers["Host"] == f"api.example.test:{target.port}"
    assert received.body == b'{"a":1}'


def _self_signed(tmp_path: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


async def test_tls_verifies_the_host_name_while_connecting_to_the_address(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "api.example.test")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    sni: list[str | None] = []
    server_tls.sni_callback = lambda _sock, name, _ctx: sni.append(name)  # type: ignore[assignment, func-returns-value]
    trust = ssl.create_default_context(cafile=str(cert))
    resolve = resolver_for({"api.example.test": ["127.0.0.1"], "other.example.test": ["127.0.0.1"]})
    with TargetServer("127.0.0.1", tls=server_tls) as server:
        async with guarded_client(allow=["127.0.0.1"], resolver=resolve, ssl_context=trust) as client:
            response = await client.get(f"https://api.example.test:{server.port}/secure")
            assert response.status_code == 200
            # Same address, another name: the certificate does not match it, so it is refused.
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(f"https://other.example.test:{server.port}/wrong-name")
        assert [r.path for r in server.received] == ["/secure"]
        assert server.received[0].headers["Host"] == f"api.example.test:{server.port}"
    assert sni == ["api.example.test", "other.example.test"]


async def test_declared_size_over_limit_is_refused_before_reading(target: TargetServer) -> None:
    target.route("/big", Reply(body=b"x" * (2 * MiB)))
    async with guarded_client(allow=["127.0.0.1"], max_response_bytes=MiB) as client:
        with pytest.raises(ResponseTooLarge) as error:
            await client.get(f"{target.url}/big")
    assert error.value.info.code == "response_too_large" and not error.value.retryable


async def test_undeclared_size_is_cut_at_the_limit(target: TargetServer) -> None:
    target.route("/stream", Reply(body=b"x" * (3 * MiB), length=False))
    async with guarded_client(allow=["127.0.0.1"], max_response_bytes=MiB) as client:
        with pytest.raises(ResponseTooLarge):
            await client.get(f"{target.url}/stream")
        # At the limit exactly is fine.
        target.route("/exact", Reply(body=b"y" * MiB, length=False))
        assert len((await client.get(f"{target.url}/exact")).content) == MiB


async def test_compressed_bomb_is_bounded_after_decoding(target: TargetServer) -> None:
    bomb = gzip.compress(b"\0" * (20 * MiB))
    assert len(bomb) < MiB
    target.route("/bomb", Reply(headers={"Content-Encoding": "gzip"}, body=bomb))
    target.route("/small", Reply(headers={"Content-Encoding": "gzip"}, body=gzip.compress(b"hello " * 100)))
    async with guarded_client(allow=["127.0.0.1"], max_response_bytes=MiB) as client:
        with pytest.raises(ResponseTooLarge):
            await client.get(f"{target.url}/bomb")
        small = await client.get(f"{target.url}/small")
    assert small.text == "hello " * 100 and "content-encoding" not in small.headers
    # Control: an unguarded client inflates the whole bomb.
    async with httpx.AsyncClient(trust_env=False) as plain:
        assert len((await plain.get(f"{target.url}/bomb")).content) == 20 * MiB


async def test_total_deadline_covers_a_slow_drip(target: TargetServer) -> None:
    """Each byte arrives well within the read timeout; only a total deadline stops the drip."""
    target.route("/drip", Reply(body=b"z" * 20, drip=0.1))
    async with guarded_client(allow=["127.0.0.1"], timeout=0.5) as client:
        started = time.monotonic()
        with pytest.raises(RequestDeadlineExceeded) as error:
            await client.get(f"{target.url}/drip")
    elapsed = time.monotonic() - started
    assert 0.4 < elapsed < 1.5, elapsed
    assert error.value.info.code == "http_timeout" and error.value.retryable
    # Control: httpx's per-read timeout alone lets the whole 2 s drip through.
    async with httpx.AsyncClient(trust_env=False, timeout=0.5) as plain:
        assert (await plain.get(f"{target.url}/drip")).content == b"z" * 20


async def test_redirects_followed_within_the_allow_list_up_to_the_limit(target: TargetServer) -> None:
    target.route("/a", Reply(302, headers={"Location": "/b"}, body=b""))
    target.route("/loop", Reply(302, headers={"Location": "/loop"}, body=b""))
    async with guarded_client(allow=["127.0.0.1"], max_redirects=3) as client:
        response = await client.get(f"{target.url}/a")
        assert (response.status_code, str(response.url)) == (200, f"{target.url}/b")
        with pytest.raises(httpx.TooManyRedirects):
            await client.get(f"{target.url}/loop")
    assert [r.path for r in target.received] == ["/a", "/b"] + ["/loop"] * 4


async def test_sdk_flavour_enforces_the_same_rules(target: TargetServer) -> None:
    target.route("/big", Reply(body=b"x" * (2 * MiB), length=False))
    async with guarded_sdk_client(allow=["127.0.0.1"], max_response_bytes=MiB) as client:
        response = await client.post(f"{target.url}/v1/chat", json={"q": "hi"})
        assert response.status_code == 200
        with pytest.raises(ResponseTooLarge):
            await client.get(f"{target.url}/big")
    async with guarded_sdk_client() as closed:
        with pytest.raises(BlockedDestination):
            await closed.get(f"{target.url}/refused")
    assert [(r.path, r.body) for r in target.received] == [("/v1/chat", b'{"q":"hi"}'), ("/big", b"")]


async def test_no_cookie_a_response_sets_rides_on_a_later_request(target: TargetServer) -> None:
    # One client serves every workspace: a session cookie from one call must not reach another.
    target.route("/login", Reply(headers={"Set-Cookie": "session=tenant-a; Path=/"}))
    async with guarded_client(allow=["127.0.0.1"]) as client:
        first = await client.get(f"{target.url}/login")
        await client.get(f"{target.url}/other")
    assert first.headers["set-cookie"].startswith("session=tenant-a"), "the response still shows it"
    later = [r for r in target.received if r.path == "/other"]
    assert later and "Cookie" not in later[0].headers and "cookie" not in later[0].headers
    # Control: a plain client keeps the cookie and sends it back.
    async with httpx.AsyncClient() as plain:
        await plain.get(f"{target.url}/login")
        await plain.get(f"{target.url}/plain")
    sent = [r for r in target.received if r.path == "/plain"]
    assert sent and "session=tenant-a" in sent[0].headers.get("Cookie", "")
