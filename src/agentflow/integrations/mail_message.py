"""Compose a notification email: validated addresses, no header injection, a stable Message-ID.

Pure functions over the standard library's ``email`` package. Every refusal is a
``StepFailure`` with code ``email_invalid`` that is not retryable: the same input would be
refused again.
"""

from __future__ import annotations

import email.policy
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime

from agentflow.core.errors import StepFailure

# Headers the sender writes itself; a caller setting them could forge or re-route the message.
_RESERVED_HEADERS = frozenset(
    {"from", "to", "cc", "bcc", "subject", "message-id", "date", "sender", "return-path", "mime-version"}
)
_FIELD_NAME = re.compile(r"[!-9;-~]+")  # RFC 5322: printable ASCII except the colon
# RFC 5322 dot-atom text; a Message-ID's halves must be made of it.
_DOT_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")
_MSG_ID = re.compile(rf"<({_DOT_ATOM.pattern})@({_DOT_ATOM.pattern}|\[[!-Z^-~]*\])>")
_ID_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+/?^_`{|}~-")


def invalid(message: str, **details: object) -> StepFailure:
    """The ``email_invalid`` failure (not retryable)."""
    return StepFailure(
        "email_invalid",
        message,
        retryable=False,
        details=dict(details),
        solution="Fix the address, subject or header; the same input would be refused again.",
    )


def refuse_line_breaks(field: str, value: str) -> None:
    """Refuse CR or LF in a header value: they would start a header of the caller's choosing.

    Raises:
        StepFailure: code ``email_invalid``.
    """
    if "\r" in value or "\n" in value:
        raise invalid(f"the {field} contains a line break, which could inject headers", field=field)


def parse_mailbox(value: str, field: str) -> Address:
    """Parse one mailbox (``a@example.com`` or ``Name <a@example.com>``).

    Addresses must be ASCII (write a domain in its ``xn--`` form): not every SMTP server
    accepts SMTPUTF8, and a message that bounces later is worse than a refusal now.

    Raises:
        StepFailure: code ``email_invalid``: not exactly one valid mailbox.
    """
    refuse_line_breaks(field, value)
    try:
        header = email.policy.default.header_factory(field, value)
        addresses = header.addresses
        defects = header.defects
    except Exception:  # the parser raises IndexError and friends on some garbage ("a@")
        raise invalid(f"the {field} address {value!r} is not a valid email address", field=field) from None
    if defects or len(addresses) != 1:
        raise invalid(f"the {field} address {value!r} is not exactly one valid email address", field=field)
    address: Address = addresses[0]
    if not address.username or not address.domain or not address.addr_spec.isascii():
        raise invalid(
            f"the {field} address {value!r} is not a valid ASCII address (user@domain)", field=field
        )
    return address


def format_message_id(message_id: str, domain: str) -> str:
    """The Message-ID header for ``message_id``: the same input always gives the same header.

    ``<left@right>`` ids are kept as they are; anything else becomes ``<id@domain>`` with
    characters a Message-ID may not contain (and ``=``, ``.``) written as ``=XX``, so two
    different ids never collide.

    Raises:
        StepFailure: code ``email_invalid``: empty, or contains a line break.
    """
    refuse_line_breaks("message_id", message_id)
    if not message_id.strip():
        raise invalid("the message_id is empty", field="message_id")
    if _MSG_ID.fullmatch(message_id):
        return message_id
    left = "".join(
        char if char in _ID_SAFE else "".join(f"={byte:02X}" for byte in char.encode()) for char in message_id
    )
    return f"<{left}@{domain}>"


def compose(
    *,
    sender: Address,
    recipients: Sequence[Address],
    subject: str,
    body: str,
    message_id: str,
    headers: Mapping[str, str] | None = None,
) -> EmailMessage:
    """Build a plain-text UTF-8 message.

    Raises:
        StepFailure: code ``email_invalid``: a line break in the subject or a header, a
            malformed or reserved header name.
    """
    refuse_line_breaks("subject", subject)
    message = EmailMessage(policy=email.policy.SMTP)
    message["From"] = sender
    message["To"] = list(recipients)
    message["Subject"] = subject
    message["Date"] = format_datetime(datetime.now(UTC))
    message["Message-ID"] = format_message_id(message_id, sender.domain)
    for name, value in (headers or {}).items():
        if not _FIELD_NAME.fullmatch(name):
            raise invalid(f"{name!r} is not a valid header name", field="headers")
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS or lowered.startswith("content-"):
            raise invalid(f"the header {name!r} is set by the sender and cannot be overridden", field=name)
        refuse_line_breaks(f"header {name!r}", value)
        message[name] = value
    message.set_content(body, charset="utf-8")
    return message
