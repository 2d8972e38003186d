"""A real local SMTP server that keeps every message it receives (aiosmtpd).

For the demo (``agentflow demo``) and tests: notifications go out over real SMTP and land
here instead of in someone's inbox. Each message is kept in memory and, when a file is
given, appended to it as one JSON line. Recipients can be made to fail with a chosen
reply (``550 ...`` or ``451 ...``) to exercise a sender's error handling.

Example:
    >>> with SmtpSink() as sink:  # doctest: +SKIP
    ...     sender = EmailSender(f"smtp://{sink.host}:{sink.port}", "agentflow@example.com")
"""

from __future__ import annotations

import email
import email.policy
import json
import socket
import threading
from collections.abc import Awaitable, Mapping
from dataclasses import asdict, field
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Self

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from agentflow.core.frozen import frozen


@frozen
class ReceivedMessage:
    """One message as the sink received it.

    Attributes:
        mail_from: the envelope sender (``MAIL FROM``).
        rcpt_tos: the envelope recipients (``RCPT TO``) the sink accepted.
        subject: the decoded Subject header.
        body: the decoded plain-text body.
        message_id: the Message-ID header.
        headers: every header, decoded (the last one wins for a repeated name).
        received_at: when it arrived (UTC, ISO 8601).
    """

    mail_from: str
    rcpt_tos: list[str]
    subject: str
    body: str
    message_id: str
    headers: dict[str, str] = field(default_factory=dict)
    received_at: str = ""


class SmtpSink:
    """A recording SMTP server; start it, or use it as a context manager.

    Args:
        jsonl_path: append every message to this file as a JSON line, when given.
        reject: recipient address (lower case) -> the reply to refuse it with, e.g.
            ``{"gone@example.com": "550 5.1.1 No such user"}``.
        credentials: ``(user, password)`` a login must match (AUTH is offered without TLS:
            the sink is for local use only); mail sent without logging in is still accepted.

    Attributes:
        host / port: where the running sink listens (set by :meth:`start`).
    """

    def __init__(
        self,
        *,
        jsonl_path: Path | None = None,
        reject: Mapping[str, str] | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self._jsonl_path = jsonl_path
        self._reject = {address.lower(): reply for address, reply in (reject or {}).items()}
        self._credentials = credentials
        self._lock = threading.Lock()
        self._messages: list[ReceivedMessage] = []
        self._controller: _SocketController | None = None
        self.host = ""
        self.port = 0

    def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen on ``host:port`` (0: a free port) in a background thread.

        Returns:
            The ``(host, port)`` it listens on.
        """
        if self._controller is not None:
            raise RuntimeError("the SMTP sink is already running")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP named: asyncio turns Nagle off only on sockets whose proto says TCP (an
        # accepted one inherits the listener's), else each reply waits on a delayed ACK.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Bound here, handed to the server: no other process can take the port in between.
        sock.bind((host, port))
        self.host, self.port = host, int(sock.getsockname()[1])
        auth: dict[str, Any] = {}
        if self._credentials is not None:
            auth = {"authenticator": self._authenticate, "auth_require_tls": False}
        self._controller = _SocketController(
            _Handler(self), sock, hostname=host, port=self.port, server_hostname="agentflow-smtp-sink", **auth
        )
        self._controller.start()
        return self.host, self.port

    def stop(self) -> None:
        """Stop listening (messages stay readable)."""
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``smtp://host:port`` of the running sink."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"smtp://{host}:{self.port}"

    @property
    def messages(self) -> list[ReceivedMessage]:
        """Every message received so far, in arrival order."""
        with self._lock:
            return list(self._messages)

    def rejection_for(self, address: str) -> str | None:
        """The reply configured to refuse ``address``, if any."""
        return self._reject.get(address.lower())

    def record(self, envelope: Envelope) -> None:
        """Keep one delivered message (called from the server's thread)."""
        raw = envelope.original_content or envelope.content or b""
        data = raw if isinstance(raw, bytes) else raw.encode()
        parsed = email.message_from_bytes(data, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        part = parsed.get_body(("plain",))
        body = part.get_content() if isinstance(part, EmailMessage) else ""
        message = ReceivedMessage(
            mail_from=str(envelope.mail_from or ""),
            rcpt_tos=list(envelope.rcpt_tos),
            subject=str(parsed.get("subject", "")),
            body=str(body).replace("\r\n", "\n"),  # SMTP's CRLF, shown as Python text
            message_id=str(parsed.get("message-id", "")),
            headers={name: str(value) for name, value in parsed.items()},
            received_at=datetime.now(UTC).isoformat(),
        )
        with self._lock:
            self._messages.append(message)
            if self._jsonl_path is not None:
                with self._jsonl_path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(asdict(message), ensure_ascii=False) + "\n")

    def _authenticate(
        self, _server: SMTP, _session: Session, _envelope: Envelope, _mechanism: str, auth_data: Any
    ) -> AuthResult:
        assert self._credentials is not None
        user, password = self._credentials
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login == user.encode()
            and auth_data.password == password.encode()
        )
        # handled=False: aiosmtpd itself answers 535 to a failed login.
        return AuthResult(success=ok, handled=False)


class _Handler:
    """aiosmtpd's hooks: refuse configured recipients, record delivered messages."""

    def __init__(self, sink: SmtpSink) -> None:
        self._sink = sink

    async def handle_RCPT(  # noqa: N802 - aiosmtpd's hook name
        self, _server: SMTP, _session: Session, envelope: Envelope, address: str, _options: list[str]
    ) -> str:
        rejection = self._sink.rejection_for(address)
        if rejection is not None:
            return rejection
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, _server: SMTP, _session: Session, envelope: Envelope
    ) -> str:
        self._sink.record(envelope)
        return "250 Message accepted for delivery"


class _SocketController(Controller):
    """aiosmtpd's threaded controller, serving a socket bound beforehand (so port 0 works)."""

    def __init__(self, handler: _Handler, sock: socket.socket, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._sock = sock

    def _create_server(self) -> Awaitable[Any]:
        return self.loop.create_server(self._factory_invoker, sock=self._sock, ssl=self.ssl_context)
