"""Webhook triggers: HTTP calls that start workflows (``engine.webhooks``).

A call is an event like any other: it is stored in the event log (topic
``webhook.<workflow id>``, message id = the caller's ``webhook-id`` or ``Idempotency-Key``,
else a new time-ordered id) and admitted to its workflow in the same transaction, through
the same conditions, debounce, enrollment and mode as events from the log. Repeating a call
with the same id returns the original decision instead of acting twice.

Public triggers may require a Standard Webhooks signature: give the workflow a signing
secret (``rotate_secret``) and every public call must carry ``webhook-id``,
``webhook-timestamp`` (within 300 s) and a valid ``webhook-signature``.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import standardwebhooks
from pydantic import ValidationError

from agentflow.core.errors import AuthError, ConfigError, ConflictError, NotFoundError
from agentflow.core.events import EventIn
from agentflow.core.frozen import frozen
from agentflow.core.ids import uuid7
from agentflow.core.payload_format import payload_errors
from agentflow.core.records import VersionRecord
from agentflow.core.sealing import SealBroken, seal, unseal_any
from agentflow.runtime import tracing
from agentflow.runtime.admission import Config, Decision, admit, record
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.leases import LocalWorker
from agentflow.runtime.lifecycle_listeners import LifecycleListeners
from agentflow.store import access, decisions, events, workflows
from agentflow.store.database import TRANSACTION_CONFLICTS, Database
from agentflow.store.dispatch import EnrollmentContention

SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
_ATTEMPTS = 3  # a transaction rolled back by a deadlock is run again up to this many times
_RETRIED: tuple[type[Exception], ...] = (*TRANSACTION_CONFLICTS, EnrollmentContention)


@frozen
class Fired:
    """The outcome of a webhook call.

    Attributes:
        decision: what was decided (see ``admission.Decision``).
        topic / message_id: the event the call became.
        replayed: True when this id had been seen: the original decision is returned.
    """

    decision: Decision
    topic: str
    message_id: str
    replayed: bool

    @property
    def debounced(self) -> bool:
        """True when the call waits in a debounce window."""
        return self.decision.decision == "debounced"


class Webhooks:
    """Fire workflows from HTTP calls; manage their signing secrets."""

    def __init__(
        self,
        db: Database,
        configs: ConfigCache,
        sealing_key: Callable[[], bytes],
        previous_keys: Sequence[bytes] = (),
        listeners: LifecycleListeners | None = None,
    ) -> None:
        """``previous_keys``: keys signing secrets may still be sealed with (a rotation under way);
        ``listeners``: who hears ``run.canceled`` of a run a ``restart`` replaces."""
        self.db = db
        self._configs = configs
        self._listeners = listeners or LifecycleListeners(db, configs)
        self._sealing_key = sealing_key
        self._previous = tuple(previous_keys)
        # The worker of this process that runs the runs a call starts, at once (eager starts;
        # set by ``Engine.worker``).
        self.local: LocalWorker | None = None

    async def target(self, workflow: UUID | str, *, workspace_id: UUID) -> VersionRecord:
        """The latest version of a live workflow that a call may start.

        Raises:
            NotFoundError: ``workflow_not_found``.
            ConflictError: ``workflow_disabled`` (disabled or a draft).
        """
        found = await workflows.resolve_live(
            self.db.pool,
            workspace_id,
            workflow_id=workflow if isinstance(workflow, UUID) else None,
            name=workflow if isinstance(workflow, str) else None,
        )
        if found is None:
            raise NotFoundError("workflow_not_found", f"no workflow {workflow!s} in this workspace")
        version, live = found
        if not live:
            raise ConflictError(
                "workflow_disabled",
                f"workflow {version.config.get('name')!r} is disabled or a draft; triggers cannot start it",
                solution="Enable and publish the workflow (agentflow workflows apply, without --draft).",
            )
        return version

    async def fire(
        self,
        version: VersionRecord,
        payload: Any,
        *,
        source: str,
        request_id: str | None,
        workspace_id: UUID,
    ) -> Fired:
        """Store the call as an event and admit it to the workflow, in one transaction.

        Args:
            version: from ``target``.
            payload: the JSON body (an object); the run's input.
            source: ``public`` or ``private``; kept on the run's trigger document.
            request_id: the caller's id for this call (``webhook-id``/``Idempotency-Key``).
            workspace_id: the workflow's workspace.

        Raises:
            ConfigError: ``payload_invalid`` (not an object, or not the payload_format) or
                ``request_id_invalid``.
        """
        config = self._configs.parse(version)
        if not isinstance(payload, dict):
            raise ConfigError(
                "payload_invalid",
                "the request body must be a JSON object",
                details={"errors": [{"path": "", "message": "expected an object"}]},
                solution='Send a JSON object, e.g. {"account_id": "a-1"}.',
            )
        if config.payload_format:
            problems = payload_errors(config.payload_format, payload)
            if problems:
                raise ConfigError(
                    "payload_invalid",
                    f"the payload does not match the workflow's payload_format at {problems[0]['path']}:"
                    f" {problems[0]['message']}",
                    details={"errors": problems},
                    solution="Send the fields the workflow's payload_format declares.",
                )
        topic = f"webhook.{version.workflow_id}"
        message_id = request_id or str(uuid7(time.time_ns() // 1_000_000, os.urandom(10)))
        try:
            item = EventIn(topic=topic, message_id=message_id, data=payload)
        except ValidationError:
            raise ConfigError(
                "request_id_invalid",
                "the request id (webhook-id or Idempotency-Key) must be 1 to 200 printable ASCII characters",
                solution="Send a shorter id without spaces, or none.",
            ) from None
        new = events.NewEvent(topic, message_id, payload, None, item.resolved_account())
        for _attempt in range(_ATTEMPTS):
            try:
                return await self._store_and_admit(version, config, new, source, workspace_id)
            except _RETRIED:
                continue  # rolled back: nothing was written, so running it again is safe
        raise ConflictError(
            "trigger_contention",
            "the workflow's runs for this key kept changing; nothing was done",
            solution="Retry the call (with the same Idempotency-Key).",
        )

    async def _store_and_admit(
        self, version: VersionRecord, config: Config, new: events.NewEvent, source: str, workspace_id: UUID
    ) -> Fired:
        tell = await self._listeners.telling_cancels(workspace_id, self.local)
        committed = False
        try:
            async with self.db.pool.acquire() as conn, conn.transaction():
                (published,) = await events.publish(conn, workspace_id, [new], tracing.current_traceparent())
                if not published.created:
                    prior = await decisions.decision_of(
                        conn, workspace_id, version.workflow_id, new.topic, new.message_id
                    )
                    if prior is not None:
                        decision = Decision(
                            prior["decision"], prior["run_id"], prior["enrollment_key"], prior["reason"]
                        )
                        return Fired(decision, new.topic, new.message_id, replayed=True)
                decision = await admit(
                    conn, version, config, published.event, source, datetime.now(UTC), tell
                )
                await record(conn, [(version, published.event, decision)])
            committed = True
        finally:
            tell.settle(committed)  # an eager start's run goes to the local worker once committed
        return Fired(decision, new.topic, new.message_id, replayed=not published.created)

    # Signing secrets -------------------------------------------------------------------

    async def rotate_secret(self, workflow_id: UUID, *, workspace_id: UUID) -> str:
        """Give the workflow a new signing secret (``whsec_...``, shown once); from now on its
        public trigger requires Standard Webhooks signatures made with it."""
        secret = "whsec_" + _b64(os.urandom(24))
        sealed = seal(self._sealing_key(), secret.encode(), secret_bound(workspace_id, workflow_id))
        await access.put_secret(self.db.pool, workspace_id, workflow_id, sealed)
        return secret

    async def remove_secret(self, workflow_id: UUID, *, workspace_id: UUID) -> bool:
        """Stop requiring signatures; False when the workflow had no secret."""
        return await access.delete_secret(self.db.pool, workspace_id, workflow_id)

    async def has_secret(self, workflow_id: UUID, *, workspace_id: UUID) -> bool:
        """Whether the workflow's public trigger requires signatures."""
        return await access.get_secret(self.db.pool, workspace_id, workflow_id) is not None

    async def verify(
        self, workflow_id: UUID, body: bytes, headers: Mapping[str, str], *, workspace_id: UUID
    ) -> str | None:
        """Check a public call's signature when the workflow has a secret.

        Returns:
            The verified ``webhook-id`` (the call's message id), or None when the workflow
            requires no signature.

        Raises:
            AuthError: ``signature_missing`` or ``signature_invalid`` (also for a timestamp
                outside the 300 s window).
        """
        sealed = await access.get_secret(self.db.pool, workspace_id, workflow_id)
        if sealed is None:
            return None
        present = {name: headers.get(name) for name in SIGNATURE_HEADERS}
        if not all(present.values()):
            missing = ", ".join(name for name, value in present.items() if not value)
            raise AuthError(
                "signature_missing",
                f"this trigger requires a Standard Webhooks signature; missing header(s): {missing}",
                solution="Sign the request with the workflow's webhook secret (see docs/webhooks.md).",
            )
        try:
            keys = (self._sealing_key(), *self._previous)
            secret = unseal_any(keys, sealed, secret_bound(workspace_id, workflow_id)).decode()
        except SealBroken:
            raise ConflictError(
                "secret_unreadable",
                "the workflow's signing secret cannot be decrypted with this server's AGENTFLOW_SECRET_KEY",
                solution="Use the key the secret was created with, or rotate the secret.",
            ) from None
        try:
            standardwebhooks.Webhook(secret).verify(
                body, {k: str(v) for k, v in present.items()}, json_parse=False
            )
        except Exception as exc:  # the library raises several types for malformed headers
            raise AuthError(
                "signature_invalid",
                f"the webhook signature does not verify: {_reason(exc)}",
                solution="Sign '<webhook-id>.<webhook-timestamp>.<body>' with HMAC-SHA256; the timestamp"
                " must be within 300 s of now.",
            ) from None
        return str(present["webhook-id"])


def secret_bound(workspace_id: UUID, workflow_id: UUID) -> bytes:
    """What a workflow's signing secret is sealed with (its row), so it opens nowhere else."""
    return f"webhook_secret:{workspace_id}:{workflow_id}".encode()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _reason(exc: Exception) -> str:
    if isinstance(exc, standardwebhooks.webhooks.WebhookVerificationError):
        return str(exc).lower() or "no matching signature"
    return "malformed signature headers"
