"""The reply reader: the workflow's model reads free-text replies to requests, and a relevant
one answers its request (issue 14; seed 001, section 7).

A loop beside every worker's claim loop, like the notifier. It claims unread replies with a
lease, asks the ``ReplyJudge`` outside any transaction, and records what it read, fenced on
its claim. A ``relevant`` reading answers the request through the same conditional statement
as every other channel (the first answer wins; the reply to an answered request is ``late``);
an ``uncertain`` one, a reading that does not fit the request, and a reply sent by someone
other than the person the address was given to are ``held`` for a person in the inbox;
``filtered`` ones are ``ignored``. A reading that fails is tried again with backoff, and after
``MAX_ATTEMPTS`` held with the error. The model's tokens count in the workspace's day.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from email.utils import parseaddr
from typing import Any

from agentflow.agent.stops import workspace_breach
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.link_tokens import read_holder
from agentflow.core.records import RunRecord
from agentflow.core.replies import ReplyJudge, ReplyQuestion, ReplyVerdict
from agentflow.core.request_answers import checked_answer
from agentflow.runtime import companion_spans
from agentflow.runtime.configs import ConfigCache
from agentflow.settings import Settings
from agentflow.store import approvals, reads, replies, requests
from agentflow.store.database import Database, describe, unavailable

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
LEASE_SECONDS = 120.0
READ_TIMEOUT = 60.0
RETRY_BASE = 5.0
"""Seconds before a failed reading is tried again (doubling with each attempt)."""
BATCH = 5


class ReplyReader:
    """Reads unread replies until stopped.

    Args:
        db: the database.
        judge: what reads a reply (the model-backed ``ModelReplyJudge``).
        configs: the worker's parsed workflow configs (whose ``model`` reads the reply).
        settings: the daily model budget and the default model.
        owner: this reader's lease name.
        poll_interval: the longest it sleeps between looks.
    """

    def __init__(
        self,
        db: Database,
        judge: ReplyJudge,
        configs: ConfigCache,
        settings: Settings,
        *,
        owner: str,
        poll_interval: float = 1.0,
    ) -> None:
        self._db = db
        self._judge = judge
        self._configs = configs
        self._settings = settings
        self._owner = owner
        self._poll = poll_interval
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Stop after the current batch."""
        self._stopping.set()

    async def run(self) -> None:
        """Read until ``stop()``."""
        while not self._stopping.is_set():
            try:
                read = await self.read_due()
            except Exception as exc:
                if not unavailable(exc):
                    raise
                logger.warning("reply reader: database unavailable (%s)", describe(exc))
                read = 0
            if read < BATCH:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self._poll)

    async def read_due(self) -> int:
        """Claim and read one batch; return how many were claimed."""
        batch = await replies.claim(self._db.pool, self._owner, LEASE_SECONDS, BATCH)
        await asyncio.gather(*(self._read(row) for row in batch))
        return len(batch)

    async def _read(self, reply: dict[str, Any]) -> None:
        pool, ws = self._db.pool, reply["workspace_id"]
        request = await requests.get_request(pool, ws, reply["request_id"])
        run = await reads.get_run(pool, ws, request["run_id"]) if request is not None else None
        with companion_spans.reply_span(
            reply, run.id if run else None, run.trace_parent if run else None
        ) as span:
            outcome, label = await self._settle(reply, request, run)
            companion_spans.end_reply(span, outcome, label, "reply_unread" if outcome == "retry" else None)

    async def _settle(
        self, reply: dict[str, Any], request: dict[str, Any] | None, run: RunRecord | None
    ) -> tuple[str, str | None]:
        """Read the reply and act on it; return the outcome and the model's label."""
        pool, ws = self._db.pool, reply["workspace_id"]
        if request is None or request["status"] != "pending" or request["expired"]:
            # Answered (or timed out) before the reply was read: no model needs to read it.
            shown = "timed out" if request is None or request["expired"] else request["status"]
            by = f" by {request['responded_by']}" if request and request["responded_by"] else ""
            await self._record(reply, None, None, {"reason": f"the request was already {shown}{by}"}, "late")
            return "late", None
        try:
            verdict = await asyncio.wait_for(self._ask(reply, request, run), READ_TIMEOUT)
        except Exception as exc:
            if unavailable(exc):
                raise
            error = {"code": "reply_unread", "message": f"{type(exc).__name__}: {exc}"[:1000]}
            logger.warning("reply %s could not be read: %s", reply["id"], error["message"])
            if reply["attempts"] >= MAX_ATTEMPTS:  # a person reads it instead
                await self._record(reply, "uncertain", None, {"error": error}, "held")
                return "held", "uncertain"
            await replies.retry_later(
                pool, ws, reply["id"], self._owner, RETRY_BASE * 2 ** reply["attempts"], error
            )
            return "retry", None
        reading = {"approved": verdict.approved, "response": verdict.response, "reason": verdict.reason}
        reading.update(verdict.details)
        outcome = {"relevant": "answered", "filtered": "ignored", "uncertain": "held"}[verdict.label]
        responder = reply["sender"]  # in a Slack thread: whoever in the channel wrote
        if reply["via"] == "email":  # the person the email went to, and only from their address
            person, address = parseaddr(read_holder(reply["given_to"])[1])
            responder = person or address
            if outcome == "answered" and reply["sender"] != address.lower():
                outcome, reading["held_because"] = "held", f"sent by {reply['sender']}, not {address}"
        if outcome == "answered":
            try:
                answered = await self._answer(request, verdict, responder, reply["via"])
            except ConfigError as exc:  # the reading does not fit what was asked
                outcome, reading["held_because"] = "held", exc.info.message
            else:
                outcome = "answered" if answered else "late"
        await self._record(reply, verdict.label, verdict.score, reading, outcome)
        return outcome, verdict.label

    async def _ask(
        self, reply: dict[str, Any], request: dict[str, Any], run: RunRecord | None
    ) -> ReplyVerdict:
        pool, ws = self._db.pool, reply["workspace_id"]
        limits = self._settings
        breach = await workspace_breach(pool, ws, limits.workspace_daily_usd, limits.workspace_daily_tokens)
        if breach is not None:
            raise RuntimeError(breach.message)
        verdict = await self._judge.read(
            ReplyQuestion(request, reply["text"], reply["sender"], await self._model(request, run))
        )
        d = verdict.details
        if "input_tokens" in d:
            async with pool.acquire() as conn:
                usage = (d["input_tokens"], d["output_tokens"], 0)
                await approvals.add_model_call(conn, ws, usage, d.get("usd_cost", 0.0))
        return verdict

    async def _model(self, request: dict[str, Any], run: RunRecord | None) -> str | None:
        """The model of the request's workflow: an agent's, or the ``user_input`` node's."""
        if run is None:
            return None
        config = await self._configs.for_run(run)
        if isinstance(config, AgentConfig):
            return config.model
        if isinstance(config, StructuredConfig) and request["node_id"]:
            found: str | None = getattr(config.node(request["node_id"]), "model", None)
            return found
        return None

    async def _answer(self, request: dict[str, Any], verdict: ReplyVerdict, person: str, via: str) -> bool:
        """Answer the request with the reading; False when it was answered first."""
        pool, ws = self._db.pool, request["workspace_id"]
        if request["node_id"] is None:  # an agent's tool approval: edits only in the console
            if verdict.approved is None:
                raise ConfigError("response_invalid", "the reply neither approves nor rejects the call")
            status = "approved" if verdict.approved else "rejected"
            reason = None if verdict.approved else verdict.reason
            return await approvals.decide(pool, ws, request["id"], status, reason, person, None, None, via)
        status, outcome, value = checked_answer(request, verdict.approved, verdict.response)
        return await requests.answer(
            pool, ws, request["id"], status=status, outcome=outcome, response=value,
            reason=verdict.reason if status == "rejected" else None, responded_by=person, via=via,
        )  # fmt: skip

    async def _record(
        self,
        reply: dict[str, Any],
        label: str | None,
        score: float | None,
        verdict: dict[str, Any],
        outcome: str,
    ) -> None:
        await replies.record(
            self._db.pool, reply["workspace_id"], reply["id"], self._owner,
            label=label, score=score, verdict=verdict, outcome=outcome,
        )  # fmt: skip
