"""OAuth2 consent in the browser (issue 13): "connect" an authorization-code credential.

``start`` makes the URL of the provider's consent page for a credential: its client id, scopes,
the redirect URI, a single-use ``state`` and a PKCE challenge (S256). The provider sends the
person back to the redirect URI (``/api/public/oauth2/callback`` by default) with a code and the
state; ``finish`` takes the consent the state names, once, and exchanges the code with the
verifier for tokens (``Credentials.authorize``). The consent keeps only the state's SHA-256 and
the verifier sealed with the secret key; it lasts ``CONSENT_SECONDS``.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from urllib.parse import urlencode
from uuid import UUID

from agentflow.core.credentials import CredentialRecord
from agentflow.core.errors import AuthError, ConfigError, ConflictError
from agentflow.core.frozen import frozen
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.link_tokens import new_token, token_hash
from agentflow.core.sealing import seal, unseal_any
from agentflow.credentials import Credentials
from agentflow.store import credentials as store
from agentflow.store.database import Database

CONSENT_SECONDS = 600.0
CALLBACK_PATH = "/api/public/oauth2/callback"


@frozen
class Consent:
    """Where to send the person, and until when the consent may come back."""

    authorize_url: str
    redirect_uri: str
    expires_at: datetime


class Consents:
    """Start and finish OAuth2 consents for authorization-code credentials.

    Args:
        db: the database.
        credentials: the credential store (``finish`` exchanges the code through it).
        sealing_key: returns the key the PKCE verifier is sealed with.
        base_url: the API's external base URL (the default redirect URI is under it).
        previous_keys: keys verifiers may still be sealed with (a rotation under way).
    """

    def __init__(
        self,
        db: Database,
        credentials: Credentials,
        sealing_key: Callable[[], bytes],
        base_url: str,
        previous_keys: Sequence[bytes] = (),
    ) -> None:
        self.db = db
        self._credentials = credentials
        self._sealing_key = sealing_key
        self._base_url = base_url
        self._previous = tuple(previous_keys)

    async def start(
        self, name: str, *, redirect_uri: str | None = None, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> Consent:
        """The consent URL of credential ``name``.

        Raises:
            NotFoundError: ``credential_not_found``.
            ConflictError: ``credential_kind_mismatch``.
            ConfigError: ``authorize_url_missing``.
        """
        record = await self._credentials.get(name, workspace_id=workspace_id)
        if record.kind != "oauth2_authorization_code":
            raise ConflictError(
                "credential_kind_mismatch",
                f"credential {name!r} is {record.kind}; consents are for oauth2_authorization_code ones",
                solution="Start the consent of the authorization-code credential of this client.",
            )
        authorize = record.metadata.get("authorize_url")
        if not authorize:
            raise ConfigError(
                "authorize_url_missing",
                f"credential {name!r} has no authorize_url: the provider's consent page is not known",
                solution=f"Replace the credential with its authorize_url (PUT /api/credentials/{name}).",
            )
        redirect = redirect_uri or f"{self._base_url}{CALLBACK_PATH}"
        state, verifier = new_token(), secrets.token_urlsafe(48)
        sealed = seal(self._sealing_key(), verifier.encode(), consent_bound(workspace_id, name))
        expires = await store.add_consent(
            self.db.pool, workspace_id, token_hash(state), name, redirect, sealed, CONSENT_SECONDS
        )
        query = {
            "response_type": "code",
            "client_id": record.metadata["client_id"],
            "redirect_uri": redirect,
            "state": state,
            "code_challenge": challenge(verifier),
            "code_challenge_method": "S256",
        }
        if record.metadata.get("scopes"):
            query["scope"] = " ".join(record.metadata["scopes"])
        joiner = "&" if "?" in authorize else "?"
        return Consent(f"{authorize}{joiner}{urlencode(query)}", redirect, expires)

    async def finish(self, state: str, code: str) -> CredentialRecord:
        """Exchange ``code`` for the consent ``state`` names (once), storing the tokens.

        Raises:
            AuthError: ``consent_invalid`` (unknown, used or expired state).
            Everything ``Credentials.authorize`` raises.
        """
        found = await store.take_consent(self.db.pool, token_hash(state))
        if found is None:
            raise AuthError(
                "consent_invalid",
                "this consent is unknown, used already, or expired",
                solution="Start the consent again (POST /api/credentials/{name}/oauth2/authorize).",
            )
        workspace, name = found["workspace_id"], found["credential_name"]
        keys = (self._sealing_key(), *self._previous)
        verifier = unseal_any(keys, found["verifier"], consent_bound(workspace, name)).decode()
        return await self._credentials.authorize(
            name, code, redirect_uri=found["redirect_uri"], code_verifier=verifier, workspace_id=workspace
        )


def challenge(verifier: str) -> str:
    """The PKCE S256 challenge of ``verifier`` (RFC 7636)."""
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def consent_bound(workspace_id: UUID, name: str) -> bytes:
    """What a sealed verifier is bound to (its workspace and credential), so it opens nowhere else."""
    return f"oauth2-consent:{workspace_id}:{name}".encode()
