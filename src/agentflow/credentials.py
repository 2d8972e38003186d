"""The workspace credential store (``engine.credentials``): named secrets nodes reference by name.

Create, replace, list and delete credentials; a secret goes in and never comes out (the API,
the CLI and every record show a credential's name, kind, metadata and the *names* of its
secret fields). Secrets are sealed with AES-256-GCM under ``AGENTFLOW_SECRET_KEY`` (with the
embedded server, a key file in the data directory), bound to their workspace and name.

Workers resolve credentials when a step runs (``agentflow.nodes.credential_access``); a node
may name a credential that does not exist yet, so workflows can be published first: the step
then fails with ``credential_not_found``.

For ``oauth2_authorization_code`` credentials, ``authorize`` exchanges the code a person
brought back from the provider's consent page for tokens; tokens obtained elsewhere can be
given directly instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID, uuid4

from agentflow.core.credentials import CredentialRecord, CredentialSpec, check_name, parse_spec, sealed_with
from agentflow.core.errors import AgentflowError, ConflictError, NotFoundError, StepFailure
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.sealing import SealBroken, seal, unseal_any
from agentflow.integrations import oauth2
from agentflow.integrations.guarded_http import guarded_client
from agentflow.store import credentials as store
from agentflow.store import references
from agentflow.store.database import Database


class TokenEndpointError(AgentflowError):
    """The OAuth2 token endpoint could not be used (502)."""

    status_code = 502


class GrantRefused(AgentflowError):
    """The OAuth2 token endpoint refused the code (422)."""

    status_code = 422


class Credentials:
    """Create, replace, list, delete and authorize a workspace's credentials.

    Args:
        db: the database.
        sealing_key: returns the key secrets are sealed with (``settings.sealing_key``).
        http_allow: allow-list entries for the token requests of ``authorize``
            (``settings.http_allow_list``).
        previous_keys: keys secrets may still be sealed with (a rotation under way).
    """

    def __init__(
        self,
        db: Database,
        sealing_key: Callable[[], bytes],
        http_allow: Sequence[str] = (),
        previous_keys: Sequence[bytes] = (),
    ) -> None:
        self.db = db
        self._sealing_key = sealing_key
        self._allow = tuple(http_allow)
        self._previous = tuple(previous_keys)

    async def create(
        self, name: str, spec: CredentialSpec | dict[str, Any], *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> CredentialRecord:
        """Store a new credential.

        Args:
            name: what nodes write in ``credential:``.
            spec: its ``kind`` and that kind's fields (see ``agentflow.core.credentials``).

        Raises:
            ConfigError: ``credential_invalid``.
            ConflictError: ``credential_exists``; ``secret_key_missing`` when the server has no key.
        """
        check_name(name)
        new = self._sealed(workspace_id, name, _spec(spec))
        record = await store.insert(self.db.pool, workspace_id, uuid4(), name, new)
        if record is None:
            raise ConflictError(
                "credential_exists",
                f"this workspace already has a credential {name!r}",
                solution=f"Replace it with PUT /api/credentials/{name} (agentflow credentials set), or pick"
                " another name.",
            )
        return record

    async def put(
        self, name: str, spec: CredentialSpec | dict[str, Any], *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> tuple[CredentialRecord, bool]:
        """Create the credential, or replace all of it (kind, metadata and secret); returns it
        and whether it was created. A token refresh in flight is superseded.

        Raises:
            ConfigError: ``credential_invalid``.
            ConflictError: ``secret_key_missing``.
        """
        check_name(name)
        new = self._sealed(workspace_id, name, _spec(spec))
        return await store.put(self.db.pool, workspace_id, uuid4(), name, new)

    async def get(self, name: str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> CredentialRecord:
        """A credential by name (never its secret).

        Raises:
            NotFoundError: ``credential_not_found``.
        """
        found = await store.get(self.db.pool, workspace_id, name)
        if found is None:
            raise _not_found(name)
        return found

    async def list(self, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> list[CredentialRecord]:
        """The workspace's credentials by name (never their secrets)."""
        return await store.list_all(self.db.pool, workspace_id)

    async def delete(
        self, name: str, *, force: bool = False, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> CredentialRecord:
        """Delete a credential; steps that name it then fail with ``credential_not_found``.

        Args:
            force: delete it even though published workflows use it.

        Raises:
            NotFoundError: ``credential_not_found``.
            ConflictError: ``resource_in_use`` (the workflows that use it are listed).
        """
        if await store.get(self.db.pool, workspace_id, name) is None:
            raise _not_found(name)
        await references.refuse_if_used(
            self.db.pool,
            workspace_id,
            [f"credential:{name}"],
            doing=f"delete credential {name!r}",
            force=force,
        )
        found = await store.delete(self.db.pool, workspace_id, name)
        if found is None:
            raise _not_found(name)
        return found

    async def authorize(
        self,
        name: str,
        code: str,
        *,
        redirect_uri: str | None = None,
        code_verifier: str | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> CredentialRecord:
        """Exchange an authorization code for tokens and store them in an
        ``oauth2_authorization_code`` credential (its client id and secret say who asks).

        Args:
            code: the code the provider's consent page gave back.
            redirect_uri: the redirect URI the authorization request named, if it named one.
            code_verifier: the PKCE verifier, when the authorization request had a challenge.

        Raises:
            NotFoundError: ``credential_not_found``.
            ConflictError: ``credential_kind_mismatch``, ``credential_changed`` (replaced during
                the exchange), ``credential_unreadable``, ``secret_key_missing``.
            GrantRefused: ``oauth2_grant_refused`` (422).
            TokenEndpointError: ``oauth2_token_failed`` or ``oauth2_token_invalid`` (502).
        """
        row = await store.read_sealed(self.db.pool, workspace_id, name, 0.0)
        if row is None:
            raise _not_found(name)
        if row.kind != "oauth2_authorization_code":
            raise ConflictError(
                "credential_kind_mismatch",
                f"credential {name!r} is {row.kind}; only oauth2_authorization_code credentials take a code",
                solution="Exchange the code for the authorization-code credential of this client.",
            )
        secret = self._open(workspace_id, row)
        client = oauth2.Client(
            token_url=row.metadata["token_url"],
            client_id=row.metadata["client_id"],
            client_secret=secret.get("client_secret"),
            client_auth="body" if row.metadata.get("client_auth") == "body" else "basic",
        )
        async with guarded_client(allow=self._allow) as http:
            try:
                grant = await oauth2.request_token(
                    http, client, oauth2.code_form(code, redirect_uri, code_verifier)
                )
            except StepFailure as exc:
                kind = GrantRefused if exc.info.code == "oauth2_grant_refused" else TokenEndpointError
                raise kind(
                    exc.info.code, exc.info.message, details=exc.info.details, solution=exc.info.solution
                ) from None
        tokens = {"access_token": grant.access_token}
        if grant.refresh_token is not None:
            tokens["refresh_token"] = grant.refresh_token
        renewed = {k: v for k, v in secret.items() if k not in ("access_token", "refresh_token")} | tokens
        sealed = seal(self._sealing_key(), json.dumps(renewed).encode(), sealed_with(workspace_id, name))
        record = await store.replace_secret(
            self.db.pool, row.id, row.version, sealed, sorted(renewed), grant.expires_in
        )
        if record is None:
            raise ConflictError(
                "credential_changed",
                f"credential {name!r} was replaced or deleted during the exchange; its tokens were not kept",
                solution="Authorize again (a code can be used once).",
            )
        return record

    def _sealed(self, workspace_id: UUID, name: str, spec: CredentialSpec) -> store.Replacement:
        secret = spec.secret()
        sealed = seal(self._sealing_key(), json.dumps(secret).encode(), sealed_with(workspace_id, name))
        expires_in = getattr(spec, "expires_in", None) if "access_token" in secret else None
        return store.Replacement(spec.kind, spec.metadata(), sealed, sorted(secret), expires_in)

    def _open(self, workspace_id: UUID, row: store.SealedRow) -> dict[str, str]:
        try:
            keys = (self._sealing_key(), *self._previous)
            document = unseal_any(keys, row.secret, sealed_with(workspace_id, row.name))
        except SealBroken:
            raise ConflictError(
                "credential_unreadable",
                f"credential {row.name!r} cannot be decrypted with this server's AGENTFLOW_SECRET_KEY",
                solution="Use the key it was stored with, or store it again (PUT /api/credentials/<name>).",
            ) from None
        secret: dict[str, str] = json.loads(document)
        return secret


def _spec(spec: CredentialSpec | dict[str, Any]) -> CredentialSpec:
    return parse_spec(spec) if isinstance(spec, dict) else spec


def _not_found(name: str) -> NotFoundError:
    return NotFoundError(
        "credential_not_found",
        f"no credential {name[:100]!r} in this workspace",
        solution="List them with GET /api/credentials (agentflow credentials list); names are"
        " case-sensitive.",
    )
