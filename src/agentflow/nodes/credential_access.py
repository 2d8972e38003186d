"""Stored credentials as node runners use them: resolved by name into what a request carries,
OAuth2 access tokens fetched and refreshed on the way.

Refreshing is claimed, not locked: a worker that finds the token missing or about to expire
(or that got a 401 with it) claims the credential's row with a conditional update on the
version it saw, asks the token endpoint, and writes the new token fenced on its claim. A
worker that cannot claim waits for the version to move on and uses the token the claimant
stored, so concurrent steps make one token request. No transaction (and no lock) is held
across the token request (``RELIABILITY.md``: never across an external call); a claim lasts
``claim_ttl`` seconds, longer than a token request may take, so a claimant that dies is
replaced after that.

Failures are :class:`~agentflow.core.errors.StepFailure` codes with a solution:
``credential_not_found``, ``credential_unreadable``, ``secret_key_missing``,
``credential_not_authorized``, ``credential_refresh_busy`` and the OAuth2 client's codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import httpx

from agentflow.core.credentials import OAUTH2_KINDS, Applied, apply, scrub, sealed_with
from agentflow.core.errors import AgentflowError, StepFailure
from agentflow.core.frozen import frozen
from agentflow.core.sealing import SealBroken, seal, unseal_any
from agentflow.integrations import oauth2
from agentflow.store import credentials as store

logger = logging.getLogger(__name__)

REFRESH_MARGIN = 60.0
"""Seconds before its expiry (database clock) an access token is refreshed."""
CLAIM_TTL = 60.0
"""Seconds a refresh claim lasts: longer than a token request may take (``oauth2.TOKEN_TIMEOUT``)."""


@frozen
class Resolved:
    """A credential ready to use.

    Attributes:
        name: the credential's name.
        applied: the headers and query parameters it adds.
        version: the version of its secret this came from (what a refresh after a 401 names).
        refreshable: an OAuth2 credential whose token can be refreshed after a 401.
        secrets: every secret value it holds, to scrub from what a step records.
    """

    name: str
    applied: Applied
    version: int
    refreshable: bool
    secrets: tuple[str, ...]


class CredentialAccess:
    """Resolve credentials by name for the steps of one worker.

    Args:
        pool: the database pool.
        sealing_key: returns the key secrets are sealed with (``settings.sealing_key``);
            called when a credential is used, so a worker without a key runs everything else.
        http: the guarded HTTP client token requests go through.
        refresh_margin / claim_ttl: see the module constants.
        poll: seconds between looks at a credential another worker is refreshing.
        wait: the most seconds a step waits for another worker's refresh (default: the claim
            lapses and this step's own token request ends, ``claim_ttl + oauth2.TOKEN_TIMEOUT``).
        previous_keys: keys secrets may still be sealed with (a rotation under way).
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        sealing_key: Callable[[], bytes],
        http: httpx.AsyncClient,
        *,
        refresh_margin: float = REFRESH_MARGIN,
        claim_ttl: float = CLAIM_TTL,
        poll: float = 0.05,
        wait: float | None = None,
        previous_keys: Sequence[bytes] = (),
    ) -> None:
        self._pool = pool
        self._sealing_key = sealing_key
        self._previous = tuple(previous_keys)
        self._http = http
        self._margin = refresh_margin
        self._claim_ttl = claim_ttl
        self._poll = poll
        self._wait = claim_ttl + oauth2.TOKEN_TIMEOUT if wait is None else wait

    async def resolve(self, workspace_id: UUID, name: str, node: str) -> Resolved:
        """The credential ``name`` of the workspace, its OAuth2 token fetched or refreshed first
        when missing or about to expire.

        Raises:
            StepFailure: see the module's codes.
        """
        row = await store.read_sealed(self._pool, workspace_id, name, self._margin)
        if row is None:
            raise _not_found(name, node)
        secret = self._open(workspace_id, row, node)
        if row.kind in OAUTH2_KINDS and "access_token" not in secret:
            return await self._refresh(workspace_id, name, node, row.version)
        if row.kind in OAUTH2_KINDS and row.stale:
            # About to expire: refresh it. While it has not expired, this token serves the step
            # when another worker is refreshing it already, or when the refresh fails.
            current = None if row.expired else _resolved(row, secret)
            try:
                return await self._refresh(workspace_id, name, node, row.version, current=current)
            except StepFailure as exc:
                if current is None:
                    raise
                logger.warning(
                    "credential %r: refreshing its token ahead of expiry failed (%s); using it meanwhile",
                    name, exc.info.code,
                )  # fmt: skip
                return current
        return _resolved(row, secret)

    async def refreshed(self, workspace_id: UUID, name: str, node: str, seen: Resolved) -> Resolved:
        """The credential with a new access token, after ``seen`` was refused (a 401): one
        token request however many steps ask at once; none when another step already
        replaced ``seen``'s token (its version moved on).

        Raises:
            StepFailure: see the module's codes.
        """
        return await self._refresh(workspace_id, name, node, seen.version)

    async def _refresh(
        self, workspace_id: UUID, name: str, node: str, seen: int, current: Resolved | None = None
    ) -> Resolved:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait
        while True:
            owner = uuid4()
            claimed = await store.claim_refresh(
                self._pool, workspace_id, name, self._margin, seen=seen, owner=owner, ttl=self._claim_ttl
            )
            if claimed is not None:
                return await self._fetch(workspace_id, claimed, owner, node)
            row = await store.read_sealed(self._pool, workspace_id, name, self._margin)
            if row is None:
                raise _not_found(name, node)
            if row.version != seen:
                secret = self._open(workspace_id, row, node)
                if "access_token" in secret:  # another step refreshed it (or a person replaced it)
                    return _resolved(row, secret)
                seen, current = row.version, None  # replaced without a token: fetch one for it
                continue
            if current is not None:
                return current
            if loop.time() > deadline:
                raise StepFailure(
                    "credential_refresh_busy",
                    f"node {node!r}: credential {name!r} is being refreshed by another worker that has"
                    " not finished",
                    details={"node": node, "credential": name},
                    solution="The step is retried by its retry policy; check the token endpoint if it keeps"
                    " happening.",
                )
            await asyncio.sleep(self._poll)

    async def _fetch(self, workspace_id: UUID, row: store.SealedRow, owner: UUID, node: str) -> Resolved:
        """Ask the token endpoint for a new access token and store it, holding the claim."""
        try:
            secret = self._open(workspace_id, row, node)
            grant = await oauth2.request_token(
                self._http, _client(row.metadata, secret), _form(row, secret, node)
            )
        except BaseException:
            with contextlib.suppress(Exception):  # else the claim lapses after claim_ttl
                await store.release_claim(self._pool, row.id, owner)
            raise
        renewed = {**secret, "access_token": grant.access_token}
        if grant.refresh_token is not None:  # rotated: the old one may no longer work
            renewed["refresh_token"] = grant.refresh_token
        sealed = seal(self._key(node), json.dumps(renewed).encode(), sealed_with(workspace_id, row.name))
        version = await store.store_refreshed(
            self._pool, row.id, owner, sealed, sorted(renewed), grant.expires_in
        )
        if version is None:  # the credential was replaced or deleted meanwhile: use what is there now
            logger.info("credential %r changed during its refresh; reading it again", row.name)
            return await self.resolve(workspace_id, row.name, node)
        logger.info("credential %r: new OAuth2 access token (version %d)", row.name, version)
        fresh = store.SealedRow(row.id, row.name, row.kind, row.metadata, sealed, version, stale=False)
        return _resolved(fresh, renewed)

    def _open(self, workspace_id: UUID, row: store.SealedRow, node: str) -> dict[str, str]:
        try:
            keys = (self._key(node), *self._previous)
            document = unseal_any(keys, row.secret, sealed_with(workspace_id, row.name))
        except SealBroken:
            raise StepFailure(
                "credential_unreadable",
                f"node {node!r}: credential {row.name!r} cannot be decrypted with this worker's"
                " AGENTFLOW_SECRET_KEY",
                retryable=False,
                details={"node": node, "credential": row.name},
                solution="Run every agentflow process with the key the credential was stored with, or"
                f" store it again (PUT /api/credentials/{row.name}).",
            ) from None
        secret: dict[str, str] = json.loads(document)
        return secret

    def _key(self, node: str) -> bytes:
        try:
            return self._sealing_key()
        except AgentflowError as exc:  # secret_key_missing, secret_key_invalid
            raise StepFailure(
                exc.code, f"node {node!r}: {exc.info.message}", retryable=False, details={"node": node},
                solution=exc.info.solution,
            ) from None  # fmt: skip


def scrubbed(value: Any, used: Sequence[Resolved]) -> Any:
    """``value`` (JSON) without the secrets of the credentials ``used``."""
    return scrub(value, _secrets(used)) if used else value


def scrubbed_failure(exc: StepFailure, used: Sequence[Resolved]) -> StepFailure:
    """``exc`` without the secrets of the credentials ``used``; for a 401 or 403, with a
    solution about the credential."""
    secrets = _secrets(used)
    info = exc.info
    solution = info.solution
    if used and info.code == "http_status" and info.details.get("status") in (401, 403):
        name = used[-1].name
        solution = (
            f"The server refused credential {name!r}: check that it is right and allowed to do this,"
            f" and replace it if not (PUT /api/credentials/{name})."
        )
    return StepFailure(
        info.code,
        scrub(info.message, secrets),
        retryable=exc.retryable,
        details=scrub(info.details, secrets),
        solution=solution,
    )


def _secrets(used: Sequence[Resolved]) -> tuple[str, ...]:
    return tuple(secret for credential in used for secret in credential.secrets)


def _resolved(row: store.SealedRow, secret: dict[str, str]) -> Resolved:
    applied = apply(row.kind, row.metadata, secret)
    return Resolved(
        row.name, applied, row.version, row.kind in OAUTH2_KINDS, (*applied.secrets, *secret.values())
    )


def _client(metadata: dict[str, Any], secret: dict[str, str]) -> oauth2.Client:
    return oauth2.Client(
        token_url=metadata["token_url"],
        client_id=metadata["client_id"],
        client_secret=secret.get("client_secret"),
        client_auth="body" if metadata.get("client_auth") == "body" else "basic",
        scopes=tuple(metadata.get("scopes", ())),
    )


def _form(row: store.SealedRow, secret: dict[str, str], node: str) -> dict[str, str]:
    client = _client(row.metadata, secret)
    if row.kind == "oauth2_client_credentials":
        return oauth2.client_credentials_form(client)
    if "refresh_token" in secret:
        return oauth2.refresh_form(client, secret["refresh_token"])
    raise StepFailure(
        "credential_not_authorized",
        f"node {node!r}: credential {row.name!r} has no "
        + ("usable access token and no refresh token" if "access_token" in secret else "tokens yet"),
        retryable=False,
        details={"node": node, "credential": row.name},
        solution="Authorize it: exchange a code with POST /api/credentials/"
        f"{row.name}/oauth2/callback, or store tokens with PUT /api/credentials/{row.name}.",
    )


def _not_found(name: str, node: str) -> StepFailure:
    return StepFailure(
        "credential_not_found",
        f"node {node!r}: this workspace has no credential {name!r}",
        retryable=False,
        details={"node": node, "credential": name},
        solution=f"Create it (POST /api/credentials, or: agentflow credentials set {name} ...), or fix the"
        " node's 'credential'; names are case-sensitive.",
    )
