"""Send notification emails over SMTP (``aiosmtplib``), with retry decisions SMTP already makes.

SMTP says whether to retry: a 4xx reply is temporary, a 5xx reply permanent. A dropped or
refused connection and a timeout are temporary too. So ``send`` raises ``StepFailure``
``smtp_failed``, retryable for those, not retryable for a 5xx rejection, whose reply text
goes into the message for the person reading it.

The Message-ID comes from the caller's ``message_id`` (a notification id), so a
notification sent again after a crash carries the same Message-ID and can be recognised
as the same message.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from urllib.parse import parse_qs, unquote, urlsplit

import aiosmtplib

from agentflow.core.errors import ConfigError, StepFailure
from agentflow.core.frozen import frozen
from agentflow.integrations.mail_message import compose, parse_mailbox

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@frozen
class SmtpServer:
    """Where and how to connect, read from an SMTP URL.

    Attributes:
        host / port: the server.
        username / password: login, when the URL has them.
        implicit_tls: ``smtps://``: TLS from the first byte (port 465).
        starttls: ``?starttls=1``: upgrade with STARTTLS, refusing to go on without it.
    """

    host: str
    port: int
    username: str | None
    password: str | None
    implicit_tls: bool
    starttls: bool

    @classmethod
    def from_url(cls, url: str) -> SmtpServer:
        """Read ``smtp://user:pass@host:port``, ``smtps://...``, ``smtp://...?starttls=1``.

        Raises:
            ConfigError: code ``smtp_url_invalid``; the message never repeats the password.
        """
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise _bad_url(str(exc)) from None
        if parts.scheme not in ("smtp", "smtps"):
            raise _bad_url(f"the scheme must be smtp or smtps, not {parts.scheme!r}")
        if not parts.hostname:
            raise _bad_url("it names no host")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = set(query) - {"starttls"}
        if unknown:
            raise _bad_url(f"unknown parameter(s) {sorted(unknown)}; only 'starttls' is understood")
        flag = query.get("starttls", ["0"])[-1].lower()
        if flag not in _TRUE | _FALSE:
            raise _bad_url(f"starttls must be 1 or 0, not {flag!r}")
        starttls = flag in _TRUE
        implicit_tls = parts.scheme == "smtps"
        if implicit_tls and starttls:
            raise _bad_url("smtps:// already uses TLS; drop ?starttls=1 (or use smtp://)")
        return cls(
            host=parts.hostname,
            port=port or (465 if implicit_tls else 587 if starttls else 25),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            implicit_tls=implicit_tls,
            starttls=starttls,
        )


def _bad_url(why: str) -> ConfigError:
    return ConfigError(
        "smtp_url_invalid",
        f"the SMTP URL is not usable: {why}",
        solution="Set AGENTFLOW_SMTP_URL like smtp://user:pass@mail.example.com:587?starttls=1 "
        "or smtps://user:pass@mail.example.com:465.",
    )


class EmailSender:
    """Sends plain-text notification emails through one SMTP server.

    Args:
        smtp_url: ``smtp://user:pass@host:port`` (``smtps://`` for implicit TLS,
            ``?starttls=1`` to require STARTTLS); user and password percent-encoded.
        from_address: the sender, ``agentflow@example.com`` or ``Agentflow <...>``.
        timeout: seconds for connecting and for each SMTP command.
        tls_context: certificates to trust (a private CA); the system's by default.
        local_hostname: the name sent in EHLO; by default the sender's domain, which avoids
            a reverse lookup of this machine's name on every message.

    Raises:
        ConfigError: an unusable URL (``smtp_url_invalid``) or sender (``smtp_from_invalid``).
    """

    def __init__(
        self,
        smtp_url: str,
        from_address: str,
        *,
        timeout: float = 30.0,
        tls_context: ssl.SSLContext | None = None,
        local_hostname: str | None = None,
    ) -> None:
        self.server = SmtpServer.from_url(smtp_url)
        try:
            self.sender = parse_mailbox(from_address, "from")
        except StepFailure as exc:
            raise ConfigError(
                "smtp_from_invalid",
                exc.info.message,
                solution="Set AGENTFLOW_SMTP_FROM to one address, e.g. agentflow@example.com.",
            ) from None
        self._timeout = timeout
        self._tls_context = tls_context
        self._local_hostname = local_hostname or self.sender.domain

    async def send(
        self,
        to: str | list[str],
        subject: str,
        body: str,
        *,
        message_id: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Send one message to every recipient.

        Args:
            to: one address or several.
            subject: one line; a line break is refused (header injection).
            body: plain text, sent as UTF-8.
            message_id: a stable id of this notification; the Message-ID is built from it.
            headers: extra headers (``Reply-To``, ``X-...``); the sender's own are reserved.

        Raises:
            StepFailure: ``email_invalid`` (not retryable) for a bad address, subject or
                header; ``smtp_failed``: retryable for connection trouble and 4xx replies,
                not retryable for 5xx rejections and TLS or capability problems, and not
                retryable when only some recipients were refused (a retry would repeat the
                message to the others).
        """
        recipients = [parse_mailbox(address, "to") for address in ([to] if isinstance(to, str) else to)]
        if not recipients:
            raise StepFailure("email_invalid", "the message has no recipient", retryable=False)
        message = compose(
            sender=self.sender,
            recipients=recipients,
            subject=subject,
            body=body,
            message_id=message_id,
            headers=headers,
        )
        try:
            refused, _reply = await aiosmtplib.send(
                message,
                sender=self.sender.addr_spec,
                recipients=[r.addr_spec for r in recipients],
                hostname=self.server.host,
                port=self.server.port,
                username=self.server.username,
                password=self.server.password,
                use_tls=self.server.implicit_tls,
                start_tls=self.server.starttls,
                timeout=self._timeout,
                tls_context=self._tls_context,
                local_hostname=self._local_hostname,
            )
        except (aiosmtplib.SMTPException, OSError) as exc:  # TLS errors are OSErrors too
            raise self._failure(exc) from exc
        if refused:
            raise self._partly_refused({rcpt: (r.code, r.message) for rcpt, r in refused.items()})

    @property
    def _where(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    def _failure(self, exc: aiosmtplib.SMTPException | OSError) -> StepFailure:
        """Turn an aiosmtplib or socket error into ``smtp_failed`` with SMTP's retry decision."""
        if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
            return self._partly_refused(
                {r.recipient: (r.code, r.message) for r in exc.recipients}, every=True
            )
        if isinstance(exc, aiosmtplib.SMTPResponseException):
            return _smtp_failed(
                f"the SMTP server {self._where} answered {exc.code} {exc.message}",
                retryable=400 <= exc.code < 500,
                details={"smtp_code": exc.code, "smtp_reply": exc.message},
            )
        # aiosmtplib raises the bare base class (or SMTPNotSupported) when the server lacks
        # something the URL asks for (STARTTLS, AUTH): a configuration problem, not an outage.
        if type(exc) is aiosmtplib.SMTPException or isinstance(exc, aiosmtplib.SMTPNotSupported):
            return _smtp_failed(
                f"the SMTP server {self._where} does not support what the URL requires: {exc}",
                retryable=False,
                solution="Check AGENTFLOW_SMTP_URL: drop ?starttls=1 or credentials the server lacks.",
            )
        if isinstance(exc, ssl.SSLError):
            return _smtp_failed(
                f"TLS with the SMTP server {self._where} failed: {exc}",
                retryable=False,
                solution="Check the server's certificate, or whether it speaks smtps:// or STARTTLS.",
            )
        # Refused or dropped connections, timeouts, a server that hung up: temporary.
        return _smtp_failed(f"could not talk to the SMTP server {self._where}: {exc}", retryable=True)

    def _partly_refused(self, refused: Mapping[str, tuple[int, str]], *, every: bool = False) -> StepFailure:
        replies = "; ".join(f"{rcpt}: {code} {text}" for rcpt, (code, text) in refused.items())
        temporary = all(400 <= code < 500 for code, _ in refused.values())
        return _smtp_failed(
            f"the SMTP server {self._where} refused {'every' if every else 'some'} recipient(s): {replies}",
            # With every recipient refused nothing was sent, so a temporary refusal can be
            # retried; with some delivered, a retry would send the message to them again.
            retryable=every and temporary,
            details={
                "refused": {rcpt: {"smtp_code": c, "smtp_reply": t} for rcpt, (c, t) in refused.items()}
            },
        )


def _smtp_failed(
    message: str,
    *,
    retryable: bool,
    details: dict[str, object] | None = None,
    solution: str | None = None,
) -> StepFailure:
    return StepFailure(
        "smtp_failed",
        message,
        retryable=retryable,
        details=details,
        solution=solution
        or (
            "Temporary: the step is retried."
            if retryable
            else "The server rejected the message for good: check the addresses and the server's reply."
        ),
    )
