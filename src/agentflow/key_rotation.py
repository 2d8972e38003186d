"""Rotate ``AGENTFLOW_SECRET_KEY`` (issue 13): seal every stored secret again with the new key.

The way through, with no moment where a secret cannot be read: (1) run every process with the
new key as ``AGENTFLOW_SECRET_KEY`` and the old one as ``AGENTFLOW_SECRET_KEY_PREVIOUS`` (they
read with either, seal with the new one); (2) ``agentflow credentials rotate-key`` seals every
credential, webhook signing secret and OAuth2 consent in flight again with the new key, in one
transaction; (3) drop ``AGENTFLOW_SECRET_KEY_PREVIOUS``. A secret that neither key opens is
left as it is and named in the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentflow.core.credentials import sealed_with
from agentflow.core.frozen import frozen
from agentflow.core.sealing import SealBroken, seal, unseal, unseal_any
from agentflow.oauth2_consents import consent_bound
from agentflow.store.database import Database
from agentflow.webhooks import secret_bound


@dataclass
class Resealed:
    """What a rotation did, by kind of secret.

    Attributes:
        resealed: secrets sealed again with the current key.
        current: secrets already sealed with it.
        unreadable: secrets no key opens (``<kind> <name or id>``), left as they were.
    """

    resealed: dict[str, int] = field(default_factory=dict)
    current: dict[str, int] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)


@frozen
class _Kind:
    """One table of sealed secrets: how to read them, how to write one back, and for each row
    its key (the update's first parameters), what it is sealed with and a name to report."""

    name: str
    select: str
    update: str
    about: Callable[[Any], tuple[tuple[Any, ...], bytes, str]]


KINDS = (
    _Kind(
        "credentials",
        "SELECT id, workspace_id, name, secret AS sealed FROM credentials FOR UPDATE",
        "UPDATE credentials SET secret = $2 WHERE id = $1",
        lambda r: ((r["id"],), sealed_with(r["workspace_id"], r["name"]), r["name"]),
    ),
    _Kind(
        "webhook_secrets",
        "SELECT workspace_id, workflow_id, ciphertext AS sealed FROM webhook_secrets FOR UPDATE",
        "UPDATE webhook_secrets SET ciphertext = $3 WHERE workspace_id = $1 AND workflow_id = $2",
        lambda r: (
            (r["workspace_id"], r["workflow_id"]),
            secret_bound(r["workspace_id"], r["workflow_id"]),
            str(r["workflow_id"]),
        ),
    ),
    _Kind(
        "oauth2_consents",
        "SELECT state_hash, workspace_id, credential_name, verifier AS sealed FROM oauth2_consents"
        " FOR UPDATE",
        "UPDATE oauth2_consents SET verifier = $2 WHERE state_hash = $1",
        lambda r: (
            (r["state_hash"],),
            consent_bound(r["workspace_id"], r["credential_name"]),
            r["credential_name"],
        ),
    ),
)


async def reseal_secrets(db: Database, current: bytes, previous: Sequence[bytes]) -> Resealed:
    """Seal every stored secret again with ``current`` (see the module's steps)."""
    done = Resealed()
    keys = (current, *previous)
    async with db.pool.acquire() as conn, conn.transaction():
        for kind in KINDS:
            done.resealed[kind.name] = done.current[kind.name] = 0
            for row in await conn.fetch(kind.select):
                key, bound, name = kind.about(row)
                try:
                    unseal(current, row["sealed"], bound)
                    done.current[kind.name] += 1
                    continue
                except SealBroken:
                    pass
                try:
                    plain = unseal_any(keys, row["sealed"], bound)
                except SealBroken:
                    done.unreadable.append(f"{kind.name} {name}")
                    continue
                await conn.execute(kind.update, *key, seal(current, plain, bound))
                done.resealed[kind.name] += 1
    return done
