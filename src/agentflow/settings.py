"""Configuration from the environment (``AGENTFLOW_*``); see docs/reference/configuration.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentflow.core.errors import ConflictError
from agentflow.core.sealing import new_sealing_key, parse_sealing_key

REPLY_GRACE = 5.0
"""Seconds past ``statement_timeout`` the client waits for a reply by default: enough for the
server's own timeout error to arrive first over a slow link."""


def _default_data_dir() -> Path:
    return platformdirs.user_data_path("agentflow", appauthor=False)


class Settings(BaseSettings):
    """Every setting, read from ``AGENTFLOW_<NAME>`` environment variables.

    Attributes:
        database_url: a PostgreSQL URL; when unset an embedded server runs in ``data_dir``.
        data_dir: where the embedded server keeps its files.
        pool_min_size / pool_max_size: connections per process.
        statement_timeout: seconds any engine statement may run.
        idle_in_transaction_timeout: seconds a connection may sit idle inside a transaction.
        client_timeout: seconds the engine waits for any one reply from the database before
            it gives the connection up (default: ``statement_timeout`` + 5). The server's
            ``statement_timeout`` bounds what the server runs; this bounds a connection that
            went silent (a half-open link, a host that vanished in a failover), which would
            otherwise hold its caller, and a run's lease with it, forever.
        lease_ttl: seconds a worker's claim on a run lasts without a heartbeat.
        poll_interval: the longest a worker sleeps before looking for due runs again.
        startup_wait: seconds ``agentflow worker`` and ``agentflow serve`` keep trying to reach
            a database that is down or restarting when they start (0: fail at once).
        worker_concurrency: runs one worker process executes at once.
        eager_start: a run started in a process whose worker has a free slot is inserted held
            by that worker and runs at once, with no claim (an eager start, as Temporal's;
            ``agentflow serve`` unless ``--no-worker``, or an ``Engine`` running a worker). Off by
            default: such runs stay in the starting process even when other workers are idle.
        max_rescues: lease expiries a run survives before it fails with ``worker_lost``.
        imports: modules to import at start-up (where your tools live), comma-separated.
        host / port: where ``agentflow serve`` listens.
        event_retention_hours: workers delete events older than this that every consumer has
            read, and dispatch decisions as old, once an hour (0: keep everything).
        run_retention_days: workers delete finished runs (with their steps) this many days
            after they ended, once an hour, in workspaces that set no retention of their own
            (0, the default: keep them).
        audit_retention_days: workers delete audit log entries this many days old, once an
            hour (0: keep them; the default keeps 400 days, a year and a bit).
        api_auth: ``required``: every API call needs a workspace API key (``Authorization:
            Bearer afk_...``); ``optional``: a key, when sent, selects its workspace, else the
            ``X-Agentflow-Workspace`` header does; ``auto`` (default): ``required`` unless
            ``serve`` listens on a loopback address only.
        allowed_hosts: the ``Host`` names the API answers to, comma-separated (``api.example.com``,
            ``*.example.com``, an IP address, or ``*`` for any); others get 421
            ``host_not_allowed``. Empty (default): ``localhost``, ``127.0.0.1`` and ``::1``
            (any port) when ``serve`` listens on loopback; any name when keys are required.
        cors_origins: web origins (``https://app.example.com``) whose pages may call the API
            cross-origin, comma-separated; empty (default): none, and writes from pages on
            other origins get 403 ``cross_origin_request``. ``*`` needs ``api_auth=required``.
        trusted_proxies: IP addresses and CIDR ranges of reverse proxies whose
            ``X-Forwarded-For`` is believed (comma-separated). Without keys, a request a
            proxy relayed is served only when the proxy is listed and its client is local.
        lifecycle_events: publish ``run.started``, ``run.completed``, ``run.failed``,
            ``step.failed`` and ``request.created`` to the event log with each change.
        metrics_workflows: workflow names whose steps get their own ``workflow`` label on
            ``/metrics``, comma-separated; ``*``: the first 100 names a worker sees; empty
            (default): every step counts under ``other`` (series stay bounded).
        secret_key_previous: the key secrets were sealed with before ``secret_key``: read with
            it while ``agentflow credentials rotate-key`` seals them again with the new one.
        reply_to: the address replies to requests' emails go to, e.g. ``replies@in.example.com``
            (a local part of at most 12 characters): each email's Reply-To is
            ``replies+<request>.<token>@in.example.com``; route that domain's mail to
            ``POST /api/public/inbound/email`` and the workflow's model reads each reply
            (docs/human-requests.md). Unset: emails have no reply address.
        slack_bot_token: the Slack app's bot token (``xoxb-...``, scope ``chat:write``): a
            ``user_input`` whose ``slack`` names a channel is posted with it, and replies in the
            message's thread are read by the workflow's model (Slack's Events API, signed with
            the signing secret, at ``/api/public/slack/events``).
        slack_api_url: Slack's Web API (another only for a proxy or a test server).
        slack_signing_secret: the Slack app's signing secret: Slack's interaction callbacks
            (buttons on requests) are verified with it; without it they are refused.
        secret_key: 32 random bytes in base64 that encrypt secrets at rest (webhook signing
            secrets). With the embedded server and no key, one is made in ``data_dir``.
        public_url: the server's external base URL, used to print webhook URLs and to make
            callback URLs (``wait_callback``); default ``http://<host>:<port>``.
        model: the default model of agent workflows and the event gate, ``provider:model``
            (``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``, ``gemini:gemini-2.0-flash``,
            ``scripted``). Unset: the deterministic scripted provider, which says so.
        openai_api_key / anthropic_api_key / gemini_api_key: vendor keys (else the vendor's
            own variable: ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``).
        openai_base_url / anthropic_base_url / gemini_base_url: another server that speaks the
            vendor's protocol (Ollama, vLLM, LM Studio for OpenAI's); reached through the
            guarded HTTP client, so a private address must be in ``http_allow``.
        model_timeout: seconds one model call may take.
        model_max_retries: retries of a model call on 429/5xx/connection errors.
        pricing_file: a YAML or JSON file of ``model: {input, output, cached_input}`` in USD per
            million tokens, overriding the built-in table.
        http_allow: hosts, IP addresses and CIDR ranges the guarded HTTP client may reach
            although they are private (comma-separated), e.g. ``127.0.0.1,10.0.0.0/8``.
        smtp_url: the SMTP server notifications are sent through
            (``smtp://user:pass@host:port``, ``smtps://`` for TLS, ``?starttls=1``).
        smtp_from: the sender address of notification emails.
        reminder_due_soon_hours / reminder_overdue_hours: when task reminders go out.
        workspace_daily_usd / workspace_daily_tokens: default model spend per workspace per
            day (UTC); agent runs past it are suspended (0: no limit).
        embeddings: what embeds knowledge for retrieval by meaning. ``provider`` (default):
            the workflow's model provider when it makes embeddings (OpenAI, Gemini), else
            keyword search only. ``local``: all-MiniLM-L6-v2 on the CPU for every search
            (needs the ``local-embeddings`` extra; start-up fails without it).
        run_code: whether ``run_code`` nodes may run: ``off`` (default: publishing one is
            refused), ``on`` (in the strongest sandbox the worker can build), ``isolated``
            (only where the worker can build the namespace sandbox; elsewhere the step fails
            with ``code_sandbox_unavailable``). See docs/security.md, "Code steps".
        run_code_python: the interpreter of Python code (default: the worker's own Python).
        run_code_node: the Node.js binary of JavaScript code (default: ``node`` on PATH).
    """

    model_config = SettingsConfigDict(env_prefix="AGENTFLOW_", extra="ignore")

    database_url: str | None = None
    data_dir: Path = Field(default_factory=_default_data_dir)

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        """Empty means unset (the embedded server); anything else must be a PostgreSQL URL."""
        if value is None or not value.strip():
            return None
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a PostgreSQL URL such as postgresql://user:password@host:5432/db")
        return value

    pool_min_size: int = Field(default=2, ge=1)
    pool_max_size: int = Field(default=20, ge=1)
    statement_timeout: float = Field(default=30.0, gt=0)
    idle_in_transaction_timeout: float = Field(default=60.0, gt=0)
    client_timeout: float | None = Field(default=None, gt=0)
    lease_ttl: float = Field(default=30.0, ge=0.3)
    poll_interval: float = Field(default=1.0, gt=0)
    startup_wait: float = Field(default=60.0, ge=0, le=86400)
    worker_concurrency: int = Field(default=16, ge=1, le=1000)
    eager_start: bool = False
    max_rescues: int = Field(default=3, ge=0)
    imports: str = ""
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    event_retention_hours: float = Field(default=720.0, ge=0)
    run_retention_days: int = Field(default=0, ge=0, le=36500)
    audit_retention_days: int = Field(default=400, ge=0, le=36500)
    api_auth: Literal["auto", "required", "optional"] = "auto"
    allowed_hosts: str = ""
    cors_origins: str = ""
    trusted_proxies: str = ""
    secret_key: SecretStr | None = None
    secret_key_previous: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_bot_token: SecretStr | None = None
    slack_api_url: str = Field(default="https://slack.com/api", pattern=r"^https?://\S+$")
    reply_to: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9._-]{1,12}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$"
    )
    lifecycle_events: bool = True
    metrics_workflows: str = ""
    public_url: str | None = None
    model: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    gemini_api_key: SecretStr | None = None
    gemini_base_url: str | None = None
    model_timeout: float = Field(default=60.0, gt=0)
    model_max_retries: int = Field(default=3, ge=0, le=10)
    pricing_file: Path | None = None
    http_allow: str = ""
    smtp_url: str | None = None
    smtp_from: str = "agentflow@localhost"
    reminder_due_soon_hours: float = Field(default=24.0, ge=0)
    reminder_overdue_hours: float = Field(default=24.0, ge=0)
    workspace_daily_usd: float = Field(default=0.0, ge=0)
    workspace_daily_tokens: int = Field(default=0, ge=0)
    embeddings: Literal["provider", "local"] = "provider"
    run_code: Literal["off", "on", "isolated"] = "off"
    run_code_python: str | None = None
    run_code_node: str | None = None

    @field_validator("client_timeout")
    @classmethod
    def _after_statement_timeout(cls, value: float | None, info: ValidationInfo) -> float | None:
        """The server's own timeout, which says what happened, must come before the client's."""
        statement = info.data.get("statement_timeout")
        if value is not None and statement is not None and value <= statement:
            raise ValueError(
                f"{value:g} s must exceed AGENTFLOW_STATEMENT_TIMEOUT ({statement:g} s);"
                " unset it to wait AGENTFLOW_STATEMENT_TIMEOUT + 5 s"
            )
        return value

    @property
    def reply_timeout(self) -> float:
        """Seconds to wait for one reply from the database (``client_timeout``, else
        ``statement_timeout`` + 5)."""
        return self.client_timeout or self.statement_timeout + REPLY_GRACE

    @property
    def import_modules(self) -> list[str]:
        """``imports`` split into module names."""
        return [m.strip() for m in self.imports.split(",") if m.strip()]

    @property
    def base_url(self) -> str:
        """The API's external base URL, without a trailing slash."""
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def http_allow_list(self) -> list[str]:
        """``http_allow`` split into entries."""
        return [m.strip() for m in self.http_allow.split(",") if m.strip()]

    @property
    def metrics_workflows_list(self) -> list[str]:
        """``metrics_workflows`` split into names."""
        return [m.strip() for m in self.metrics_workflows.split(",") if m.strip()]

    @property
    def allowed_hosts_list(self) -> list[str]:
        """``allowed_hosts`` split into entries."""
        return [m.strip() for m in self.allowed_hosts.split(",") if m.strip()]

    @property
    def cors_origins_list(self) -> list[str]:
        """``cors_origins`` split into entries."""
        return [m.strip() for m in self.cors_origins.split(",") if m.strip()]

    @property
    def trusted_proxies_list(self) -> list[str]:
        """``trusted_proxies`` split into entries."""
        return [m.strip() for m in self.trusted_proxies.split(",") if m.strip()]


def previous_sealing_keys(settings: Settings) -> tuple[bytes, ...]:
    """The keys secrets may still be sealed with during a rotation (``secret_key_previous``).

    Raises:
        ConfigError: the key is not 32 bytes in base64.
    """
    if settings.secret_key_previous is None:
        return ()
    return (parse_sealing_key(settings.secret_key_previous.get_secret_value()),)


def sealing_key(settings: Settings, embedded: bool) -> bytes:
    """The key that encrypts secrets at rest.

    ``AGENTFLOW_SECRET_KEY`` when set. Otherwise, with the embedded server, a key file in the
    data directory (made once, mode 0600, shared by every process on that directory).

    Raises:
        ConflictError: ``secret_key_missing`` on an external database without a key.
    """
    if settings.secret_key is not None:
        return parse_sealing_key(settings.secret_key.get_secret_value())
    if not embedded:
        raise ConflictError(
            "secret_key_missing",
            "AGENTFLOW_SECRET_KEY is not set, so this server cannot encrypt or read secrets",
            solution="Set AGENTFLOW_SECRET_KEY to the same 32-byte base64 key on every agentflow process.",
        )
    path = settings.data_dir / "secret.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write a private temporary file, then link it into place: readers never see a
        # partial key, and of two processes racing here exactly one key wins.
        draft = path.with_name(f".secret.key.{os.getpid()}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(new_sealing_key())
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    raw = path.read_bytes()
    if len(raw) != 32:
        raise ConflictError(
            "secret_key_invalid", f"{path} does not hold a 32-byte key", solution="Restore it."
        )
    return raw
