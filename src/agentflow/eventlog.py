"""The event log as the engine exposes it: ``engine.events``.

Example:
    >>> await engine.events.publish([{"topic": "email.received", "message_id": "m-1",
    ...                               "data": {"account_id": "a-7", "subject": "Pricing"}}])
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import ValidationError

from agentflow.core.accounts import is_account_topic, upsert_from_event
from agentflow.core.errors import ConfigError
from agentflow.core.events import MAX_BATCH, Event, EventIn, Publication
from agentflow.core.ids import DEFAULT_WORKSPACE, uuid7
from agentflow.core.triggers import Trigger, conditions_hold
from agentflow.runtime import tracing
from agentflow.runtime.admission import trigger_of
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.consumer import EventConsumer, Handler
from agentflow.store import decisions, events
from agentflow.store.database import Database


class EventLog:
    """Publish events, read what happened for an account, run consumers, prune."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._configs = ConfigCache(db.pool)

    async def publish(
        self, items: Sequence[EventIn | dict[str, Any]], *, workspace_id: UUID = DEFAULT_WORKSPACE
    ) -> list[Publication]:
        """Store events idempotently, in one commit; the answer follows the input's order.

        Raises:
            ConfigError: code ``event_invalid`` (with each offending path) or ``batch_too_large``.
        """
        if len(items) > MAX_BATCH:
            raise ConfigError(
                "batch_too_large",
                f"a batch holds at most {MAX_BATCH} events, not {len(items)}",
                solution="Split the batch.",
            )
        parsed = [_parse(item, index) for index, item in enumerate(items)]
        for index, item in enumerate(parsed):
            _check_account(item, index)
        new = [
            events.NewEvent(
                topic=e.topic,
                message_id=e.message_id or str(uuid7(time.time_ns() // 1_000_000, os.urandom(10))),
                data=e.data,
                published_at=e.published_at,
                account_id=e.resolved_account(),
            )
            for e in parsed
        ]
        traced = tracing.current_traceparent()  # the publisher's span: its runs join that trace
        return await events.publish(self.db.pool, workspace_id, new, traced) if new else []

    async def for_account(
        self,
        account_id: str,
        *,
        since_seconds: float = 7200,
        sources: list[str] | None = None,
        limit: int = 500,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> list[Event]:
        """What happened for an account in the last ``since_seconds`` (default 2 h), newest first.

        Args:
            account_id: the account.
            since_seconds: how far back.
            sources: only events of these sources (``email``, ``ticket``, ...: a topic's first
                segment; see ``agentflow.core.sources``); None for all.
            limit: at most this many events.
        """
        return await events.for_account(
            self.db.pool, workspace_id, account_id, since_seconds, limit, list(sources) if sources else None
        )

    def consumer(
        self, name: str, handler: Handler, *, workspace_id: UUID | None = None, batch_size: int = 500
    ) -> EventConsumer:
        """A consumer that feeds the log to ``handler`` (call ``await consumer.run()``)."""
        return EventConsumer(self.db, name, handler, workspace_id=workspace_id, batch_size=batch_size)

    async def lag(self, consumer: str) -> dict[str, Any]:
        """Events a consumer has not processed yet, and the oldest one's age in seconds."""
        return await events.lag(self.db.pool, consumer)

    async def decisions(
        self,
        workflow_id: UUID,
        *,
        limit: int = 50,
        before: int | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> list[dict[str, Any]]:
        """What was decided for each event at this workflow, and why; newest first.

        Args:
            workflow_id: the workflow.
            limit: at most this many.
            before: a decision id: only older ones (the next page).
        """
        async with self.db.pool.acquire() as conn:
            rows = await decisions.list_decisions(conn, workspace_id, workflow_id, limit=limit, before=before)
            missed = [row for row in rows if row["version"] is not None]
            if missed:
                stored = await events.by_ids(
                    conn, workspace_id, [(r["event_topic"], r["event_message_id"]) for r in missed]
                )
        for row in missed:
            event = stored.get((row["event_topic"], row["event_message_id"]))
            config = await self._configs.get(workspace_id, workflow_id, row["version"])
            row["reason"] = _explain_miss(trigger_of(config), event, row["created_at"])
        for row in rows:
            del row["version"]
        return rows

    async def prune(self, older_than_seconds: float) -> tuple[int, int]:
        """Delete events older than this that every consumer has processed, and dispatch
        decisions older than this that wait for nothing; return how many of each."""
        pruned = await events.prune(self.db.pool, older_than_seconds)
        async with self.db.pool.acquire() as conn:
            pruned_decisions = await decisions.prune_decisions(conn, older_than_seconds)
        return pruned, pruned_decisions


def _explain_miss(trigger: Trigger, event: Event | None, decided_at: datetime) -> dict[str, Any]:
    """Why the conditions turned the event down, worked out again as the dispatcher saw it
    (the version that decided, the time it decided), while the event is still stored."""
    if event is None:
        return {
            "conditions": None,
            "explanation_unavailable": "the event is no longer stored (event retention), so why its"
            " conditions did not hold cannot be shown",
        }
    return {"conditions": conditions_hold(trigger, event, decided_at)[1]}


def _parse(item: EventIn | dict[str, Any], index: int) -> EventIn:
    if isinstance(item, EventIn):
        return item
    try:
        return EventIn.model_validate(item)
    except ValidationError as exc:
        errors = [
            {"path": f"events[{index}]." + ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
            for e in exc.errors(include_url=False)
        ]
        raise ConfigError(
            "event_invalid",
            f"event {index} is invalid at {errors[0]['path']}: {errors[0]['message']}",
            details={"errors": errors},
            solution="Send topic (letters, digits, . _ - : /), an optional message_id and a data object.",
        ) from None


# Where each part of an account change comes from in an account.* event.
_ACCOUNT_PATHS = {"id": "account_id", "name": "data.name", "owner": "data.owner", "attributes": "data"}


def _check_account(item: EventIn, index: int) -> None:
    """Refuse an ``account.*`` event whose fields could not update its account (a bad owner,
    attributes over 64 KiB); one without an account id updates no account."""
    if not is_account_topic(item.topic) or item.resolved_account() is None:
        return
    try:
        upsert_from_event(item.topic, item.resolved_account(), item.data)
    except ConfigError as exc:
        errors = [
            {"path": f"events[{index}].{_ACCOUNT_PATHS[e['path']]}", "message": e["message"]}
            for e in exc.info.details["errors"]
        ]
        raise ConfigError(
            "event_invalid",
            f"event {index} is invalid at {errors[0]['path']}: {errors[0]['message']}",
            details={"errors": errors},
            solution="An account.* event names its account (account_id) and may carry name, owner (an"
            " email address or a name) and other fields, at most 64 KiB, that become attributes.",
        ) from None
