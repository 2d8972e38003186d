"""The event gate: "should this event start this workflow?", asked outside any transaction.

The dispatcher queues matching events of gated agent workflows as gate requests. The
gatekeeper (a loop inside every worker) claims them with a lease, asks the ``EventGate``
with a timeout, and then, in one transaction fenced on its claim, records the verdict and
starts or enrolls the run (debounce applies after the gate). A gate that fails is asked
again with backoff; after ``MAX_ATTEMPTS``, or at once when no gate is configured, the
workflow's ``gate.on_error`` decides. The model-backed gate arrives with the agent issue;
anything implementing ``EventGate`` can be plugged in (``Engine.worker(gate=...)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from opentelemetry.trace import Span

from agentflow.agent.stops import workspace_breach
from agentflow.core.definitions import AgentConfig
from agentflow.core.errors import NotFoundError
from agentflow.core.gate import EventGate, GateQuestion, GateVerdict
from agentflow.runtime import companion_spans, tracing
from agentflow.runtime.admission import proceed
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.lifecycle_listeners import LifecycleListeners
from agentflow.store import approvals, decisions, gates, workflows
from agentflow.store.database import Database, unavailable

__all__ = ["EventGate", "GateQuestion", "GateUnavailable", "GateVerdict", "Gatekeeper", "NoGate"]

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
LEASE_SECONDS = 60.0
ASK_TIMEOUT = 30.0


class GateUnavailable(Exception):
    """No gate can answer (none configured): retrying will not help."""


class NoGate:
    """The gate of a worker without one: every question goes to the workflow's ``on_error``."""

    async def decide(self, question: GateQuestion) -> GateVerdict:
        """Refuse to answer."""
        raise GateUnavailable("no event gate is configured on this worker")


class Gatekeeper:
    """Claims gate requests, asks the gate, records verdicts; ``run()`` until ``stop()``."""

    def __init__(
        self,
        db: Database,
        gate: EventGate | None,
        *,
        owner: str,
        poll_interval: float = 1.0,
        batch_size: int = 8,
        listeners: LifecycleListeners | None = None,
    ) -> None:
        self.db = db
        self.gate = gate or NoGate()
        self.owner = owner
        self.poll_interval = poll_interval
        self.batch_size = batch_size
        self._configs = ConfigCache(db.pool)
        self._listeners = listeners or LifecycleListeners(db, self._configs)
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Return from ``run`` after the current round."""
        self._stopping.set()

    async def run(self) -> None:
        """Work whenever requests are due (or the poll interval passes)."""
        while not self._stopping.is_set():
            delay = self.poll_interval
            try:
                if await self.work_once() == self.batch_size:
                    delay = 0.0
                else:
                    async with self.db.pool.acquire() as conn:
                        due = await gates.seconds_to_next(conn)
                    if due is not None:
                        delay = min(delay, max(due, 0.0))
            except Exception as exc:  # a bug must not stop the loop: the claims' leases bring them back
                if unavailable(exc):
                    logger.warning("gatekeeper: %s; retrying", exc)
                else:
                    logger.exception("gatekeeper: unexpected error; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def work_once(self) -> int:
        """Claim due requests and decide each; return how many were claimed."""
        async with self.db.pool.acquire() as conn:
            claimed = await gates.claim(conn, self.owner, self.batch_size, LEASE_SECONDS)
        await asyncio.gather(*(self._handle(request) for request in claimed))
        return len(claimed)

    async def _handle(self, request: gates.GateRequest) -> None:
        try:
            config = await self._configs.get(
                request.workspace_id, request.workflow_id, request.workflow_version
            )
        except NotFoundError:  # the workflow was deleted: nothing left to start
            async with self.db.pool.acquire() as conn, conn.transaction():
                if await gates.lock_claimed(conn, request, self.owner):
                    await gates.finish(conn, request, {"start": False, "reason": "the workflow was deleted"})
            return
        assert isinstance(config, AgentConfig)
        assert config.gate is not None  # only gated agent workflows queue requests
        with companion_spans.gate_span(config.name, request) as span:
            await self._judge(request, config, span)

    async def _judge(self, request: gates.GateRequest, config: AgentConfig, span: Span | None) -> None:
        """Ask the gate (outside any transaction), then record its verdict."""
        assert config.gate is not None
        question = GateQuestion(
            config.name,
            config.prompt,
            config.gate.instructions,
            request.event,
            config.gate.model or config.model,
        )
        settings = self.db.settings
        breach = await workspace_breach(
            self.db.pool, request.workspace_id, settings.workspace_daily_usd, settings.workspace_daily_tokens
        )
        try:
            if breach is not None:  # the workspace's daily model budget is spent: do not ask
                raise GateUnavailable(breach.message)
            async with asyncio.timeout(ASK_TIMEOUT):
                verdict = await self.gate.decide(question)
        except GateUnavailable as exc:
            verdict = self._fallback(config, "gate_unavailable", str(exc))
        except Exception as exc:
            if request.attempts < MAX_ATTEMPTS:
                async with self.db.pool.acquire() as conn:
                    error = {"type": type(exc).__name__, "message": str(exc)[:500]}
                    await gates.retry_later(conn, request, self.owner, 2.0**request.attempts, error)
                companion_spans.end_gate(span, "retry", type(exc).__name__)
                return
            verdict = self._fallback(config, "gate_failed", f"{type(exc).__name__}: {exc}"[:500])
        outcome = await self._decide(request, config, verdict)
        companion_spans.end_gate(span, outcome, verdict.details.get("error"))

    @staticmethod
    def _fallback(config: AgentConfig, code: str, message: str) -> GateVerdict:
        assert config.gate is not None
        start = config.gate.on_error == "start"
        return GateVerdict(start, f"{message}; on_error={config.gate.on_error}", {"error": code})

    async def _decide(self, request: gates.GateRequest, config: AgentConfig, verdict: GateVerdict) -> str:
        """Record the verdict and start the run it allows; return how the event was decided
        (``started`` ...), ``declined``, or ``lapsed`` (another worker holds the request now)."""
        recorded = {"start": verdict.start, "reason": verdict.reason, **verdict.details}
        refs = [(request.event["topic"], request.event["message_id"])]
        async with self.db.pool.acquire() as conn, conn.transaction():
            if not await gates.lock_claimed(conn, request, self.owner):
                return "lapsed"  # our lease lapsed and another worker claimed it: its verdict counts
            await gates.finish(conn, request, recorded)
            if "input_tokens" in verdict.details:  # the gate's model call counts in the daily budget
                d = verdict.details
                usage = (d["input_tokens"], d.get("output_tokens", 0), d.get("cached_input_tokens", 0))
                await approvals.add_model_call(conn, request.workspace_id, usage, d.get("usd_cost", 0.0))
            key = request.trigger.get("enrollment_key")
            if not verdict.start:
                await decisions.settle(
                    conn, request.workspace_id, request.workflow_id, refs, "gate_declined", None, None,
                    {"gate": recorded},
                )  # fmt: skip
                return "declined"
            version = await workflows.get_version(
                self.db.pool, request.workspace_id, request.workflow_id, request.workflow_version
            )
            assert version is not None  # versions are never deleted while their workflow exists
            trigger_doc = {"source": request.trigger["source"], "event": request.event}
            # The run continues the gate's span, else the trace its event was published in.
            trace_parent = tracing.current_traceparent() or request.trigger.get("trace_parent")
            if trace_parent is not None:
                trigger_doc["trace_parent"] = trace_parent
            reason = {"conditions": request.trigger.get("conditions"), "gate": recorded}
            tell = await self._listeners.telling_cancels(version.workspace_id)
            decision = await proceed(conn, version, config, request.event, trigger_doc, key, reason, tell)
            await decisions.settle(
                conn, request.workspace_id, request.workflow_id, refs, decision.decision, key,
                decision.run_id, decision.reason,
            )  # fmt: skip
        return decision.decision
