"""Credentials: named secrets of a workspace that nodes reference by name (no I/O).

A credential has a ``kind``, *metadata* that is not secret (the header an API key goes in,
an OAuth2 token URL, client id and scopes: shown by the API) and a *secret* (keys, passwords,
tokens: sealed at rest with the server's key, never shown, never recorded on a step). This
module validates what a person sends, splits it into metadata and secret, and says what a
credential adds to a request (:func:`apply`).

Kinds:

- ``api_key``: a key sent in a header (``X-API-Key`` by default, with an optional prefix such
  as ``Token ``) or a query parameter.
- ``basic``: HTTP Basic authentication (``Authorization: Basic base64(user:password)``).
- ``bearer``: a static bearer token (``Authorization: Bearer <token>``).
- ``oauth2_client_credentials``: a client id and secret exchanged at ``token_url`` for access
  tokens (RFC 6749 section 4.4), fetched and refreshed by the worker.
- ``oauth2_authorization_code``: tokens a person authorized (RFC 6749 section 4.1): given
  directly (``access_token``/``refresh_token``) or obtained by exchanging a code through
  ``POST /api/credentials/{name}/oauth2/callback``; refreshed with the refresh token.
"""

from __future__ import annotations

import base64
import re
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, get_args
from urllib.parse import urlsplit
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen

CredentialKind = Literal[
    "api_key", "basic", "bearer", "oauth2_client_credentials", "oauth2_authorization_code"
]
KINDS: tuple[str, ...] = get_args(CredentialKind)
OAUTH2_KINDS = frozenset({"oauth2_client_credentials", "oauth2_authorization_code"})

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$"
"""A credential's name: what nodes write in ``credential:`` (no spaces: it goes in URLs)."""
MAX_SECRET = 4_096
MIN_SCRUBBED = 4
"""Secrets shorter than this are not searched for in recorded output (they would match everywhere)."""

_NAME = re.compile(NAME_PATTERN)
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_NOT_ASCII = re.compile("[^\x20-\x7e]")
_PRINTABLE = "^[^\\x00-\\x1f\\x7f]+$"
_ASCII = "^[\\x20-\\x7e]+$"
_HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z\-]{1,200}$"
_SCOPE = r"^[!#-\[\]-~]{1,200}$"  # RFC 6749 scope-token: printable ASCII but space, " and \
_CLIENT_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive"}
)


def _printable_secret(value: SecretStr) -> SecretStr:
    # A secret ends up in a header: a line break would let it forge other headers.
    if _CONTROL.search(value.get_secret_value()):
        raise ValueError("must not contain control characters (line breaks, tabs, NUL)")
    return value


def _ascii_secret(value: SecretStr) -> SecretStr:
    # Keys and tokens go into headers as they are, and a header value is ASCII.
    if _NOT_ASCII.search(value.get_secret_value()):
        raise ValueError("must be printable ASCII (no line breaks, tabs or other characters)")
    return value


def _no_colon(value: SecretStr) -> SecretStr:
    if ":" in value.get_secret_value():
        raise ValueError("a Basic user name must not contain ':'")
    return value


def _secret_field(min_length: int, description: str, pattern: str = _PRINTABLE) -> Any:
    pattern = pattern if min_length else pattern.replace("]+$", "]*$")
    return Field(
        min_length=min_length,
        max_length=MAX_SECRET,
        description=description,
        json_schema_extra={"pattern": pattern},
    )


Secret = Annotated[
    SecretStr, _secret_field(1, "A secret (write-only).", _ASCII), AfterValidator(_ascii_secret)
]
"""A key or token: printable ASCII (it is sent in a header as it is)."""


def _http_url(value: str) -> str:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - parsing the port checks it
    except ValueError as exc:
        raise ValueError(f"the URL cannot be read: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http or https URL with a host, e.g. https://auth.example.com/token")
    return value


TokenUrl = Annotated[
    str,
    Field(
        max_length=2000,
        pattern=r"^[hH][tT][tT][pP][sS]?://[!-~]+$",
        examples=["https://auth.example.com/token"],
    ),
    AfterValidator(_http_url),
]


class _Spec(BaseModel):
    """Fields common to every kind's input."""

    model_config = ConfigDict(extra="forbid")

    secret_names: ClassVar[tuple[str, ...]] = ()

    def metadata(self) -> dict[str, Any]:
        """What is not secret: stored as plain JSON and shown by the API."""
        # ``name`` is not a field of any kind, but the API's create bodies add it beside them.
        return self.model_dump(mode="json", exclude={"kind", "name", *self.secret_names}, exclude_none=True)

    def secret(self) -> dict[str, str]:
        """The secret fields given, revealed (to be sealed at once)."""
        found = {name: getattr(self, name) for name in self.secret_names}
        return {name: value.get_secret_value() for name, value in found.items() if value is not None}


class ApiKeySpec(_Spec):
    """An API key in a header or a query parameter."""

    secret_names: ClassVar[tuple[str, ...]] = ("key",)
    kind: Literal["api_key"]
    key: Secret
    placement: Literal["header", "query"] = Field(default="header", description="Where the key goes.")
    parameter: str = Field(
        default="X-API-Key", pattern=_HEADER_NAME, description="The header's or query parameter's name."
    )
    prefix: str = Field(
        default="",
        max_length=100,
        pattern="^[\\x20-\\x7e]*$",
        description="Text before the key, e.g. 'Token '.",
    )

    @model_validator(mode="after")
    def _owned_header(self) -> ApiKeySpec:
        # Framing and routing headers belong to the HTTP client.
        if self.placement == "header" and self.parameter.lower() in _CLIENT_HEADERS:
            raise ValueError(f"the {self.parameter!r} header is set by the HTTP client, not by a credential")
        return self


class BasicSpec(_Spec):
    """HTTP Basic authentication."""

    secret_names: ClassVar[tuple[str, ...]] = ("username", "password")
    kind: Literal["basic"]
    username: Annotated[
        SecretStr,
        _secret_field(1, "The user name (write-only; no ':').", "^[^\\x00-\\x1f\\x7f:]+$"),
        AfterValidator(_printable_secret),
        AfterValidator(_no_colon),
    ]
    password: Annotated[
        SecretStr,
        _secret_field(0, "The password (write-only; may be empty)."),
        AfterValidator(_printable_secret),
    ]


class BearerSpec(_Spec):
    """A static bearer token."""

    secret_names: ClassVar[tuple[str, ...]] = ("token",)
    kind: Literal["bearer"]
    token: Secret


class _OAuth2Spec(_Spec):
    token_url: TokenUrl = Field(description="The authorization server's token endpoint.")
    client_id: str = Field(min_length=1, max_length=500, pattern=_PRINTABLE)
    scopes: list[Annotated[str, Field(pattern=_SCOPE)]] = Field(default_factory=list, max_length=50)
    client_auth: Literal["basic", "body"] = Field(
        default="basic",
        description="How the client authenticates at the token endpoint: HTTP Basic (RFC 6749's"
        " default) or client_id and client_secret in the form body.",
    )


class OAuth2ClientCredentialsSpec(_OAuth2Spec):
    """OAuth2 client credentials: the worker fetches and refreshes the access token."""

    secret_names: ClassVar[tuple[str, ...]] = ("client_secret",)
    kind: Literal["oauth2_client_credentials"]
    client_secret: Secret


class OAuth2AuthorizationCodeSpec(_OAuth2Spec):
    """OAuth2 authorization code: tokens a person authorized, refreshed with the refresh token."""

    secret_names: ClassVar[tuple[str, ...]] = ("client_secret", "access_token", "refresh_token")
    kind: Literal["oauth2_authorization_code"]
    authorize_url: TokenUrl | None = Field(
        default=None, description="The provider's consent page (for agentflow's consent URLs)."
    )
    client_secret: Secret | None = None
    access_token: Secret | None = Field(default=None, description="An access token already obtained.")
    refresh_token: Secret | None = Field(default=None, description="Its refresh token, if any.")
    expires_in: int | None = Field(
        default=None,
        ge=1,
        le=10**8,
        description="Seconds the given access_token lasts (unknown: until a 401).",
    )

    def metadata(self) -> dict[str, Any]:
        """The metadata, without ``expires_in`` (kept as the token's expiry instead)."""
        return {k: v for k, v in super().metadata().items() if k != "expires_in"}


CredentialSpec = Annotated[
    ApiKeySpec | BasicSpec | BearerSpec | OAuth2ClientCredentialsSpec | OAuth2AuthorizationCodeSpec,
    Field(discriminator="kind"),
]
_SPEC: TypeAdapter[CredentialSpec] = TypeAdapter(CredentialSpec)


def parse_spec(document: Any) -> CredentialSpec:
    """A credential's input (``kind`` and its fields) from JSON.

    Raises:
        ConfigError: ``credential_invalid``, ``details['errors']`` listing each field.
    """
    try:
        return _SPEC.validate_python(document)
    except ValidationError as exc:
        errors = [
            {"path": _path(err["loc"]), "message": err["msg"]} for err in exc.errors(include_input=False)
        ]
        raise ConfigError(
            "credential_invalid",
            f"the credential is not valid at {errors[0]['path'] or '(root)'}: {errors[0]['message']}",
            details={"errors": errors},
            solution=f"Send a 'kind' ({', '.join(KINDS)}) and that kind's fields (see docs/credentials.md).",
        ) from None


def _path(loc: tuple[int | str, ...]) -> str:
    # The first part of a location is the kind the union chose: not a field of the input.
    parts = loc[1:] if loc and loc[0] in KINDS else loc
    return ".".join(str(part) for part in parts)


def check_name(name: str) -> str:
    """``name`` if it can name a credential.

    Raises:
        ConfigError: ``credential_invalid``.
    """
    if not _NAME.fullmatch(name):
        raise ConfigError(
            "credential_invalid",
            f"{name[:100]!r} is not a credential name",
            solution="Use 1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit.",
        )
    return name


def is_name(name: str) -> bool:
    """Whether ``name`` can name a credential."""
    return _NAME.fullmatch(name) is not None


def sealed_with(workspace_id: UUID, name: str) -> bytes:
    """The associated data a credential's secret is sealed with: its row, so a sealed value
    copied to another credential does not open."""
    return f"credential:{workspace_id}:{name}".encode()


@frozen
class CredentialRecord:
    """A stored credential as anyone may see it: never its secret.

    Attributes:
        secret_fields: the names of the secret fields it holds (``client_secret``,
            ``access_token``...), not their values.
        token_expires_at: when its OAuth2 access token expires (None: unknown or none).
        version: counts changes of the secret (a replacement, a token refresh).
    """

    id: UUID
    workspace_id: UUID
    name: str
    kind: str
    metadata: dict[str, Any]
    secret_fields: list[str]
    token_expires_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime


@frozen
class Applied:
    """What a credential adds to a request.

    Attributes:
        headers: headers to set (replacing any of the same name).
        query: query parameters to add.
        secrets: the secret values, to scrub from anything recorded.
    """

    headers: dict[str, str]
    query: dict[str, str]
    secrets: tuple[str, ...]


def apply(kind: str, metadata: dict[str, Any], secret: dict[str, str]) -> Applied:
    """The headers or query parameters a credential of ``kind`` adds.

    Raises:
        KeyError: ``secret`` lacks a field the kind needs (an OAuth2 credential without an
            access token: fetch one first).
    """
    if kind == "api_key":
        value = metadata.get("prefix", "") + secret["key"]
        if metadata.get("placement", "header") == "query":
            return Applied({}, {metadata["parameter"]: secret["key"]}, (secret["key"],))
        return Applied({metadata.get("parameter", "X-API-Key"): value}, {}, (secret["key"],))
    if kind == "basic":
        pair = f"{secret['username']}:{secret['password']}".encode()
        encoded = base64.b64encode(pair).decode()
        return Applied(
            {"Authorization": f"Basic {encoded}"}, {}, (encoded, secret["username"], secret["password"])
        )
    token = secret["token"] if kind == "bearer" else secret["access_token"]
    return Applied({"Authorization": f"Bearer {token}"}, {}, (token,))


def scrub(value: Any, secrets: tuple[str, ...], mark: str = "[redacted]") -> Any:
    """``value`` (JSON) with every occurrence of a secret in its strings replaced by ``mark``:
    a server that echoes a credential back must not get it into a step's record."""
    wanted = sorted({s for s in secrets if len(s) >= MIN_SCRUBBED}, key=len, reverse=True)
    if not wanted:
        return value

    def clean(item: Any) -> Any:
        if isinstance(item, str):
            for secret in wanted:
                if secret in item:
                    item = item.replace(secret, mark)
            return item
        if isinstance(item, dict):
            return {clean(k): clean(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [clean(v) for v in item]
        return item

    return clean(value)
