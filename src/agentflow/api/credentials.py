"""``/api/credentials``: the workspace's named secrets, which nodes reference by name.

Secrets are write-only: they go in with ``POST`` and ``PUT`` and never come out; every answer
shows a credential's name, kind, metadata and the names of its secret fields. An
``oauth2_authorization_code`` credential gets its tokens either in its body (obtained
elsewhere) or from ``POST /api/credentials/{name}/oauth2/callback``, which exchanges the code
the provider's consent page gave back. See docs/credentials.md.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from agentflow.api.audit_trail import note
from agentflow.api.deps import EngineDep, WorkspaceDep
from agentflow.api.schemas import ERROR_RESPONSES, ErrorResponse, conflict
from agentflow.core.credentials import (
    NAME_PATTERN,
    ApiKeySpec,
    BasicSpec,
    BearerSpec,
    CredentialRecord,
    CredentialSpec,
    OAuth2AuthorizationCodeSpec,
    OAuth2ClientCredentialsSpec,
    is_name,
)
from agentflow.core.errors import NotFoundError

router = APIRouter(prefix="/api/credentials", tags=["credentials"], responses={**ERROR_RESPONSES})

_NAME = Field(pattern=NAME_PATTERN, max_length=100, description="What nodes write in `credential:`.")
_KEY_MISSING = "`secret_key_missing` (the server has no AGENTFLOW_SECRET_KEY)"


class Credential(BaseModel):
    """A credential as anyone may see it: never its secret."""

    model_config = ConfigDict(from_attributes=True)

    id: UUID
    name: str
    kind: str = Field(examples=["oauth2_client_credentials"])
    metadata: dict[str, Any] = Field(description="What is not secret: header, token URL, client id, scopes.")
    secret_fields: list[str] = Field(description="The names of its secret fields (never their values).")
    token_expires_at: datetime | None = Field(description="When its OAuth2 access token expires, if known.")
    version: int = Field(description="Counts changes of the secret (replacements, token refreshes).")
    created_at: datetime
    updated_at: datetime


class CredentialList(BaseModel):
    """The workspace's credentials, by name."""

    credentials: list[Credential]


# A new credential: its name beside its kind's fields (``name`` is not part of its metadata).
class ApiKeyCreate(ApiKeySpec):
    """An API key in a header or query parameter."""

    name: str = _NAME


class BasicCreate(BasicSpec):
    """HTTP Basic authentication."""

    name: str = _NAME


class BearerCreate(BearerSpec):
    """A static bearer token."""

    name: str = _NAME


class OAuth2ClientCredentialsCreate(OAuth2ClientCredentialsSpec):
    """OAuth2 client credentials."""

    name: str = _NAME


class OAuth2AuthorizationCodeCreate(OAuth2AuthorizationCodeSpec):
    """OAuth2 authorization code (tokens given, or exchanged later through .../oauth2/callback)."""

    name: str = _NAME


CredentialCreate = Annotated[
    ApiKeyCreate | BasicCreate | BearerCreate | OAuth2ClientCredentialsCreate | OAuth2AuthorizationCodeCreate,
    Field(discriminator="kind"),
]


class AuthorizationCode(BaseModel):
    """The code a provider's consent page gave back, to exchange for tokens."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(min_length=1, max_length=4096, pattern="^[\\x20-\\x7e]+$")
    redirect_uri: str | None = Field(
        default=None,
        max_length=2000,
        pattern="^[\\x21-\\x7e]+$",
        description="The redirect URI the authorization request named, if it named one.",
    )
    code_verifier: str | None = Field(
        default=None,
        min_length=43,
        max_length=128,
        pattern="^[A-Za-z0-9._~-]+$",
        description="The PKCE code verifier (RFC 7636), when the authorization request had a challenge.",
    )


_EXAMPLE = {
    "name": "crm-api",
    "kind": "oauth2_client_credentials",
    "token_url": "https://auth.example.com/oauth/token",
    "client_id": "agentflow",
    "client_secret": "s3cr3t",
    "scopes": ["contacts.read"],
}


def _shown(record: CredentialRecord) -> Credential:
    return Credential.model_validate(record)


def _name(value: str) -> str:
    # A name that cannot be a credential's names none (404, decided without a query).
    if not is_name(value):
        raise NotFoundError("credential_not_found", f"no credential {value[:100]!r} in this workspace")
    return value


@router.post(
    "",
    response_model=Credential,
    status_code=201,
    summary="Create a credential",
    responses=conflict(f"`credential_exists`, {_KEY_MISSING}"),
    openapi_extra={"requestBody": {"content": {"application/json": {"example": _EXAMPLE}}}},
)
async def create_credential(
    body: CredentialCreate, request: Request, engine: EngineDep, workspace: WorkspaceDep
) -> Credential:
    """Store a new credential; its secret is sealed and never shown again."""
    note(request, name=body.name)
    return _shown(await engine.credentials.create(body.name, body, workspace_id=workspace))


@router.get("", response_model=CredentialList, summary="List credentials")
async def list_credentials(engine: EngineDep, workspace: WorkspaceDep) -> CredentialList:
    """Every credential of the workspace, by name (never their secrets)."""
    found = await engine.credentials.list(workspace_id=workspace)
    return CredentialList(credentials=[_shown(c) for c in found])


@router.get("/{name}", response_model=Credential, summary="Get a credential")
async def get_credential(name: str, engine: EngineDep, workspace: WorkspaceDep) -> Credential:
    """A credential by name (never its secret); 404 ``credential_not_found``."""
    return _shown(await engine.credentials.get(_name(name), workspace_id=workspace))


@router.put(
    "/{name}",
    response_model=Credential,
    summary="Create or replace a credential",
    responses={201: {"model": Credential, "description": "Created"}, **conflict(_KEY_MISSING)},
)
async def put_credential(
    name: str, body: CredentialSpec, response: Response, engine: EngineDep, workspace: WorkspaceDep
) -> Credential:
    """Replace all of the credential (kind, metadata, secret), or create it (201). Steps that
    start after this use the new secret; a token refresh in flight is superseded."""
    record, created = await engine.credentials.put(_name(name), body, workspace_id=workspace)
    if created:
        response.status_code = 201
    return _shown(record)


@router.delete(
    "/{name}",
    response_model=Credential,
    summary="Delete a credential",
    responses=conflict("`resource_in_use` (workflows use it; see `force`)"),
)
async def delete_credential(
    name: str,
    engine: EngineDep,
    workspace: WorkspaceDep,
    force: Annotated[bool, Query(description="Delete it even though workflows use it.")] = False,
) -> Credential:
    """Delete a credential; steps that name it then fail with ``credential_not_found``. While
    published workflows use it, 409 ``resource_in_use`` lists them, unless ``force=true``."""
    return _shown(await engine.credentials.delete(_name(name), force=force, workspace_id=workspace))


@router.post(
    "/{name}/oauth2/callback",
    response_model=Credential,
    summary="Exchange an OAuth2 authorization code",
    responses={
        **conflict(
            f"`credential_kind_mismatch`, `credential_changed`, `credential_unreadable`, {_KEY_MISSING}"
        ),
        422: {
            "model": ErrorResponse,
            "description": "`oauth2_grant_refused`: the code (or the client) was refused; `invalid_request`",
        },
        502: {
            "model": ErrorResponse,
            "description": "`oauth2_token_failed`, `oauth2_token_invalid`: the token endpoint failed",
        },
    },
)
async def oauth2_callback(
    name: str, body: AuthorizationCode, engine: EngineDep, workspace: WorkspaceDep
) -> Credential:
    """Exchange the code for tokens at the credential's token endpoint (as its client) and
    store them; the tokens are never shown."""
    record = await engine.credentials.authorize(
        _name(name), body.code, redirect_uri=body.redirect_uri, code_verifier=body.code_verifier,
        workspace_id=workspace,
    )  # fmt: skip
    return _shown(record)


class ConsentStart(BaseModel):
    """Start a consent: where the provider sends the person back."""

    model_config = ConfigDict(extra="forbid")

    redirect_uri: str | None = Field(
        default=None,
        max_length=2000,
        pattern="^[hH][tT][tT][pP][sS]?://[\\x21-\\x7e]+$",
        description="Default: this server's /api/public/oauth2/callback (register it at the provider).",
    )


class ConsentOut(BaseModel):
    """Where to send the person to consent, and until when the consent may come back."""

    authorize_url: str = Field(description="The provider's consent page, with state and PKCE challenge.")
    redirect_uri: str
    expires_at: datetime


@router.post(
    "/{name}/oauth2/authorize",
    response_model=ConsentOut,
    summary="Start an OAuth2 consent (a 'connect' link)",
    responses={**conflict("`credential_kind_mismatch`, " + _KEY_MISSING)},
)
async def oauth2_authorize(
    name: str, body: ConsentStart, engine: EngineDep, workspace: WorkspaceDep
) -> ConsentOut:
    """The URL of the provider's consent page for this authorization-code credential (its
    ``authorize_url`` with client id, scopes, redirect URI, a single-use state and a PKCE S256
    challenge). The provider sends the person back to the redirect URI, which stores the tokens;
    the consent lasts ten minutes. 422 ``authorize_url_missing``."""
    consent = await engine.consents.start(_name(name), redirect_uri=body.redirect_uri, workspace_id=workspace)
    return ConsentOut(
        authorize_url=consent.authorize_url, redirect_uri=consent.redirect_uri, expires_at=consent.expires_at
    )
