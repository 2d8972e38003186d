"""MCP servers a workflow declares (``mcp_servers``), and how their tools are named for models.

A server is started as a subprocess speaking MCP over stdio (``command``), or reached over
streamable HTTP (``url``, through the guarded HTTP client). Agents are offered its tools as
``<server>__<tool>``; ``mcp_tool`` nodes call one by name. Everything here is validated data
and pure naming rules: connecting is ``agentflow.integrations.mcp_client``'s job.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentflow.core.agent_config import TOOL_NAME_PATTERN
from agentflow.core.credentials import NAME_PATTERN as CREDENTIAL_NAME_PATTERN
from agentflow.core.durations import parse_duration

SEPARATOR = "__"
"""Between the server's name and the tool's in the names models see: ``github__create_issue``."""
SERVER_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,29}$"
MAX_TIMEOUT = timedelta(hours=1)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,100}$")
_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)


class McpServer(BaseModel):
    """One entry of ``mcp_servers``.

    Attributes:
        name: how tools and nodes refer to it: letters, digits, ``_`` and ``-``, starting with a
            letter, at most 30 characters, without ``__`` and not ending in ``_`` (the model
            sees its tools as ``<name>__<tool>``).
        command: a stdio server: its argv (``["npx", "-y", "@modelcontextprotocol/server-x"]``),
            started on the worker for each call.
        env: variables set for the ``command`` (besides HOME, PATH, SHELL, TERM, USER and
            LOGNAME, nothing of the worker's environment is passed on).
        url: a streamable HTTP server (``http`` or ``https``), reached through the guarded HTTP
            client: a private address must be in ``AGENTFLOW_HTTP_ALLOW``.
        headers: sent with every HTTP request (``Authorization`` ...). Stored with the
            version as written: put secrets in a stored ``credential`` instead.
        credential: a stored credential (by name) whose headers (and query parameters) every
            HTTP request carries; resolved when a step connects, never stored with the version.
        timeout: how long starting or connecting, and then each request, may take.
        tools: only these of the server's tools are offered or callable (all when absent).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=SERVER_NAME_PATTERN)
    command: list[str] | None = Field(default=None, min_length=1, max_length=100)
    env: dict[str, str] | None = Field(default=None, max_length=100)
    url: str | None = Field(default=None, min_length=1, max_length=2000)
    headers: dict[str, str] | None = Field(default=None, max_length=50)
    credential: str | None = Field(default=None, pattern=CREDENTIAL_NAME_PATTERN)
    timeout: timedelta = timedelta(seconds=30)
    tools: list[str] | None = Field(default=None, min_length=1, max_length=500)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if SEPARATOR in value or value.endswith("_"):
            raise ValueError(f"a server name may not contain {SEPARATOR!r} nor end with '_'")
        return value

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> timedelta:
        return parse_duration(value)

    @field_validator("timeout")
    @classmethod
    def _timeout_range(cls, value: timedelta) -> timedelta:
        if not timedelta(0) < value <= MAX_TIMEOUT:
            raise ValueError("timeout must be more than 0 and at most 1h")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value and not value[0].strip():
            raise ValueError("command[0] must name the program to start")
        if any("\0" in part or len(part) > 4000 for part in value or ()):
            raise ValueError("each part of command must be at most 4000 characters, without NUL")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, text in (value or {}).items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if "\0" in text or len(text) > 10_000:
                raise ValueError(f"env {name!r} must be at most 10000 characters, without NUL")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError as exc:
            raise ValueError(f"url is not a URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("url may not carry a user or password: send credentials in headers")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, text in (value or {}).items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if any(c in text for c in "\r\n\0") or len(text) > 8000:
                raise ValueError(f"header {name!r} must be one line of at most 8000 characters")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str] | None) -> list[str] | None:
        names = value or []
        if any(not name or len(name) > 128 for name in names):
            raise ValueError("each entry of tools must be a tool's name (1 to 128 characters)")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tools {twice} are listed more than once")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("a server needs exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
        if self.env is not None and self.command is None:
            raise ValueError("'env' goes with 'command'; an HTTP server takes 'headers'")
        if self.headers is not None and self.url is None:
            raise ValueError("'headers' goes with 'url'; a stdio server takes 'env'")
        if self.credential is not None and self.url is None:
            raise ValueError("'credential' goes with 'url' (a streamable HTTP server)")
        return self

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the definition: two definitions with one name never share discovery."""
        return hashlib.sha256(
            orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
        ).hexdigest()

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` passes the ``tools`` allow-list."""
        return self.tools is None or tool in self.tools

    def where(self) -> str:
        """The server for messages: its command's program or its URL (no headers, no env)."""
        if self.command is not None:
            return f"command {self.command[0]!r}"
        parts = urlsplit(self.url or "")
        return f"url {parts.scheme}://{parts.netloc}{parts.path}"


def offered_name(server: str, tool: str) -> str | None:
    """The name models see for ``tool`` of ``server``, or None when the pair cannot make a
    valid tool name (more than 64 characters, or characters such as ``.`` in the tool's)."""
    name = f"{server}{SEPARATOR}{tool}"
    return name if _TOOL_NAME.match(name) else None


def split_offered(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of an offered name, or None when ``name`` is not one."""
    server, sep, tool = name.partition(SEPARATOR)
    return (server, tool) if sep and server and tool else None


def check_servers(servers: list[McpServer] | None) -> list[McpServer] | None:
    """Refuse two servers with one name (their tools' names would collide)."""
    names = [s.name for s in servers or ()]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"MCP server name(s) {twice} are declared more than once")
    return servers
