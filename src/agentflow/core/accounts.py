"""Accounts: what the agent knows about the customer a run is about (seed 000, "Information
about the Account"), and how ``account.*`` events change it.

An account has an id (the CRM's), a name, an owner (an email address or a person's name) and
free-form ``attributes``. Every change is an upsert that merges: fields not given are kept,
attributes given are merged into the stored ones, and an attribute set to ``null`` is removed.
Validation and the folding of events into upserts are pure and live here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import fields
from datetime import datetime
from typing import Any, Self
from uuid import UUID

import orjson

from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen

MAX_ID_CHARS = 200
MAX_NAME_CHARS = 500
MAX_OWNER_CHARS = 320
MAX_ATTRIBUTES_BYTES = 64 * 1024
MAX_LIST = 500
ACCOUNT_TOPIC_PREFIX = "account."
"""Events whose topic starts with this (``account.updated``, ...) upsert their account."""
RESERVED_FIELDS = ("account_id", "name", "owner")
"""Fields of an account event's data that are not attributes."""

EMAIL_PATTERN = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"
_EMAIL = re.compile(EMAIL_PATTERN)
# A person's name: letters (any script), digits, spaces and the punctuation names carry.
_PERSON = re.compile(r"^[^\W_][\w .,'()&-]*$")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@frozen
class AccountRecord:
    """An account as stored.

    Attributes:
        id: the account's id (the one events carry in ``account_id``).
        name: its display name.
        owner: who looks after it: an email address or a person's name.
        attributes: everything else known about it (status, plan, renewal date, ...).
    """

    workspace_id: UUID
    id: str
    name: str | None
    owner: str | None
    attributes: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> Self:
        """Build from a database row (a mapping); extra columns are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in dict(row).items() if k in names})

    def document(self) -> dict[str, Any]:
        """The account as JSON: what a run's context shows the model."""
        return {
            "id": self.id,
            "name": self.name,
            "owner": self.owner,
            "attributes": self.attributes,
            "updated_at": self.updated_at.isoformat(),
        }


@frozen
class AccountUpsert:
    """One validated change to an account.

    Attributes:
        account_id: the account.
        name / owner: new values; None keeps the stored one.
        attributes: merged into the stored attributes; a key whose value is None is removed.
    """

    account_id: str
    name: str | None = None
    owner: str | None = None
    attributes: Mapping[str, Any] | None = None

    @property
    def set_attributes(self) -> dict[str, Any]:
        """The attributes to set (those not None)."""
        return {k: v for k, v in (self.attributes or {}).items() if v is not None}

    @property
    def removed_attributes(self) -> list[str]:
        """The attribute names to remove (given as None)."""
        return [k for k, v in (self.attributes or {}).items() if v is None]

    def then(self, later: AccountUpsert) -> AccountUpsert:
        """This change followed by ``later`` (of the same account), as one change."""
        merged = None
        if self.attributes is not None or later.attributes is not None:
            # A None value stays a removal marker, so "remove then set" and "set then
            # remove" compose like applying the two changes one after the other.
            merged = {**(self.attributes or {}), **(later.attributes or {})}
        return AccountUpsert(
            self.account_id,
            later.name if later.name is not None else self.name,
            later.owner if later.owner is not None else self.owner,
            merged,
        )


def parse_upsert(
    account_id: Any,
    *,
    name: Any = None,
    owner: Any = None,
    attributes: Any = None,
) -> AccountUpsert:
    """Validate a change to an account.

    Raises:
        ConfigError: ``account_invalid``, with each offending field in ``details.errors``.
    """
    errors = [
        {"path": path, "message": problem}
        for path, problem in (
            ("id", id_problem(account_id)),
            ("name", _text_problem(name, MAX_NAME_CHARS)),
            ("owner", owner_problem(owner)),
            ("attributes", attributes_problem(attributes)),
        )
        if problem
    ]
    if errors:
        raise ConfigError(
            "account_invalid",
            f"the account is invalid at {errors[0]['path']}: {errors[0]['message']}",
            details={"errors": errors},
            solution="An id has 1 to 200 characters; the owner is an email address or a name;"
            " attributes are a JSON object of at most 64 KiB.",
        )
    return AccountUpsert(account_id, name, owner, attributes)


def check_id(account_id: Any) -> str:
    """An account id, checked.

    Raises:
        ConfigError: ``account_invalid``.
    """
    problem = id_problem(account_id)
    if problem:
        raise ConfigError(
            "account_invalid",
            f"the account id {problem}",
            details={"errors": [{"path": "id", "message": problem}]},
        )
    return str(account_id)


def id_problem(value: Any) -> str | None:
    """What is wrong with an account id, or None."""
    if not isinstance(value, str):
        return "must be a string"
    if not 1 <= len(value) <= MAX_ID_CHARS:
        return f"must have 1 to {MAX_ID_CHARS} characters"
    if _UNSTORABLE.search(value):
        return "contains a NUL character or a lone surrogate, which cannot be stored"
    return None


def owner_problem(value: Any) -> str | None:
    """What is wrong with an owner (an email address or a person's name), or None."""
    problem = _text_problem(value, MAX_OWNER_CHARS)
    if problem or value is None:
        return problem
    text = str(value)
    if "@" in text:
        return None if _EMAIL.match(text) else "is not an email address (name@example.com)"
    if not _PERSON.match(text):
        return "must be an email address or a person's name (letters, digits, spaces, . , ' - & ( ))"
    return None


def attributes_problem(value: Any) -> str | None:
    """What is wrong with attributes (a JSON object of at most 64 KiB), or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return "must be a JSON object"
    try:
        text = orjson.dumps(dict(value))
    except TypeError as exc:  # lone surrogates, integers beyond 64 bits, non-JSON values
        return f"cannot be stored as JSON ({exc})"
    if len(text) > MAX_ATTRIBUTES_BYTES:
        return f"take {len(text)} bytes as JSON, over the {MAX_ATTRIBUTES_BYTES} allowed"
    if b"\\u0000" in text:
        return "contain the NUL character (\\u0000), which PostgreSQL cannot store"
    return None


def is_account_topic(topic: str) -> bool:
    """Whether events of this topic upsert their account."""
    return topic.startswith(ACCOUNT_TOPIC_PREFIX)


def upsert_from_event(topic: str, account_id: str | None, data: Mapping[str, Any]) -> AccountUpsert:
    """The change an ``account.*`` event makes: ``name`` and ``owner`` from its data, every
    other field (but ``account_id``) an attribute.

    Raises:
        ConfigError: ``account_invalid`` when the event has no account id or its fields are
            invalid (see ``parse_upsert``).
    """
    if account_id is None:
        raise ConfigError(
            "account_invalid",
            f"a {topic} event needs an account id (account_id, or data.account_id)",
            details={"errors": [{"path": "id", "message": "missing"}]},
        )
    attributes = {k: v for k, v in data.items() if k not in RESERVED_FIELDS}
    return parse_upsert(
        account_id, name=data.get("name"), owner=data.get("owner"), attributes=attributes or None
    )


def fold_events(items: Iterable[tuple[str, str | None, Mapping[str, Any]]]) -> list[AccountUpsert]:
    """One change per account from ``(topic, account_id, data)`` events in log order.

    Events of other topics are ignored, and so are invalid account events (the event log
    refuses them before they are stored; this keeps any other writer from failing). The
    result is ordered by account id, so concurrent writers lock accounts in the same order.
    """
    folded: dict[str, AccountUpsert] = {}
    for topic, account_id, data in items:
        if not is_account_topic(topic):
            continue
        try:
            change = upsert_from_event(topic, account_id, data)
        except ConfigError:
            continue
        before = folded.get(change.account_id)
        folded[change.account_id] = change if before is None else before.then(change)
    return [folded[key] for key in sorted(folded)]


def _text_problem(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return "must be a string"
    if not 1 <= len(value) <= limit:
        return f"must have 1 to {limit} characters"
    if _UNSTORABLE.search(value):
        return "contains a NUL character or a lone surrogate, which cannot be stored"
    return None
