"""Decide, once per connection, which addresses a host may be reached at.

The guard normalizes the host, reads IP literals in every encoding a socket accepts,
otherwise asks the resolver exactly once, and refuses the destination if *any* answer is
non-public and not opened by the allow-list (a mixed answer is how DNS rebinding and
round-robin tricks sneak a private address in). The caller connects to the addresses it
returns, never to the name, so no second lookup can answer differently.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from ipaddress import ip_address

from agentflow.integrations.addresses import (
    Category,
    IPAddress,
    MalformedHost,
    classify_address,
    normalize_host,
    parse_ip_literal,
)
from agentflow.integrations.allow_list import AllowList
from agentflow.integrations.http_errors import ALLOW_VARIABLE, BlockedDestination

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> [ip, ...]``: the addresses a host name resolves to."""

# RFC 6761: these names are the local host whatever a resolver says; no lookup needed.
_LOOPBACK_ANSWER: tuple[IPAddress, ...] = (ip_address("127.0.0.1"), ip_address("::1"))


async def resolve_with_system(host: str, port: int) -> list[str]:
    """The default resolver: the operating system's ``getaddrinfo``, off the event loop.

    Raises:
        OSError: the name does not resolve (``socket.gaierror``).
    """
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class ResolutionFailed(OSError):
    """The resolver gave no usable answer (the connection fails as unreachable, retryable)."""


class DestinationGuard:
    """Checks destinations against the default rules and the allow-list.

    Args:
        allow: the operator's allow-list.
        resolver: how host names become addresses.
    """

    def __init__(self, allow: AllowList, resolver: Resolver) -> None:
        self._allow = allow
        self._resolver = resolver

    async def check(self, raw_host: str, port: int) -> list[IPAddress]:
        """Return the addresses ``raw_host:port`` may be connected to, in the resolver's order.

        Raises:
            BlockedDestination: a malformed host, or an answer that is not public and not
                allowed.
            ResolutionFailed: the resolver failed or answered nothing usable.
        """
        try:
            host = normalize_host(raw_host)
            literal = parse_ip_literal(host)
        except MalformedHost as exc:
            raise BlockedDestination(
                f"refused to connect to {raw_host!r}: {exc}",
                details={"host": raw_host, "port": port, "reason": str(exc)},
            ) from None
        if literal is not None:
            addresses = [literal]
        elif host == "localhost" or host.endswith(".localhost"):
            addresses = list(_LOOPBACK_ANSWER)
        else:
            addresses = await self._resolve(host, port)
        for address in addresses:
            self._refuse_unless_allowed(raw_host, host, port, address, literal=literal is not None)
        return addresses

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        try:
            answers = await self._resolver(host, port)
        except OSError as exc:
            raise ResolutionFailed(f"could not resolve {host!r}: {exc}") from exc
        try:
            addresses = [ip_address(answer) for answer in answers]
        except ValueError as exc:
            raise ResolutionFailed(f"the resolver answered {host!r} with a non-address: {exc}") from None
        if not addresses:
            raise ResolutionFailed(f"{host!r} resolved to no address")
        return addresses

    def _refuse_unless_allowed(
        self, raw_host: str, host: str, port: int, address: IPAddress, *, literal: bool
    ) -> None:
        verdict = classify_address(address)
        if verdict is None or self._allow.admits(host, port, address, verdict):
            return
        shown = f"[{raw_host}]" if ":" in raw_host else raw_host
        if str(address) == raw_host:
            via = ""
        else:
            via = f" (that is {address})" if literal else f" (resolved to {address})"
        if verdict.category is Category.METADATA:
            hint = f"cloud metadata addresses open only when {ALLOW_VARIABLE} names the exact address"
        else:
            hint = f"add {address if literal else host} to {ALLOW_VARIABLE} if this is intended"
        raise BlockedDestination(
            f"refused to connect to {shown}:{port}{via}: {address} is {verdict.reason}; {hint}",
            details={
                "host": raw_host,
                "port": port,
                "address": str(address),
                "category": verdict.category.value,
                "reason": verdict.reason,
            },
        )
