"""B2: a hypothesis state machine over the run lifecycle, against the real store and database.

Each example gets a fresh workspace in the test's own database with two workflows: a
structured one started by events (enrollment key over two accounts; a tool step the machine
makes succeed or fail, two attempts with a 10-minute backoff, a one-hour wait, finish) and an
agent whose scripted model calls ``create_task``, which needs a person's approval, then
completes. The machine then interleaves, in any order hypothesis chooses:

* ingest an event (a small set of message ids, so re-posts happen) and run one dispatcher
  batch (the real ``Dispatcher`` behind a real ``EventConsumer``);
* start runs directly (with or without an enrollment key), including agent runs;
* three simulated workers that do what ``agentflow.runtime.worker`` does, one call at a time:
  claim (the real ``runs.claim``), load and begin a step, execute it (the real node runners
  and agent loop), checkpoint it (the real fenced checkpoint), heartbeat, release; crash
  (forget every claim, leaving leases to expire); and stall past a lease while another
  worker takes the run over, so that the stalled one later writes with a stale token;
* advance time: every due time, lease and approval deadline of the workspace moved back by
  31 s (leases lapse), an hour (waits and backoffs fire) or eight days (approvals expire),
  since the database clock itself cannot be moved;
* decide an approval, cancel a run, retry a failed run.

After every step it checks, from the database and from its own record of every fencing token
the store handed out:

* at most one active run per (workflow, enrollment key);
* one completed checkpoint per (run, step), exactly the steps before the run's ``step_seq``;
* no write with a stale token accepted (checkpoint, begin, heartbeat, release, cancel at a
  checkpoint), and every write by the current holder accepted; no token changed
  by anything but an operation that hands one out;
* every status change (recorded by a trigger the test adds, ``tests.support.lifecycle_audit``)
  allowed by ``agentflow.core.statuses``: terminal runs stay terminal, a failed run comes back
  only by ``retry``;
* every event stored once, a re-post answered with the original; every event decided once by
  the dispatcher, every run it started present and started once;
* an approval decided at most once.

The run is bounded (``B2_EXAMPLES`` examples of up to ``B2_STEPS`` steps, about 8,000 steps
in 30-60 s; more with ``AGENTFLOW_B2_EXAMPLES``) and its seed printed (rerun with
``AGENTFLOW_B2_SEED``). A session that explored too little (the counts the test asserts
depend on timing too) is topped up with sessions of the seeds that follow, within a time
budget, before it is judged. The negative control runs the same machine against a checkpoint whose
fencing condition was removed: the machine must report a stale write accepted.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar
from uuid import UUID

import asyncpg
import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

import agentflow
from agentflow.agent.env import AgentEnv
from agentflow.core.chat import Message, ModelRequest, ToolCall
from agentflow.core.definitions import AgentConfig
from agentflow.core.errors import ConflictError
from agentflow.core.inbox import EMPTY
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus, can_transition
from agentflow.core.step_context import StepContext
from agentflow.core.tools import ToolRegistry
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.threads import ToolThreads
from agentflow.runtime import agent_step, step
from agentflow.runtime.agent_setup import build_agent_env
from agentflow.runtime.configs import ConfigCache
from agentflow.runtime.consumer import EventConsumer
from agentflow.runtime.dispatcher import Dispatcher
from agentflow.store import approvals, checkpoints, inbox, reads, runs
from tests.support import lifecycle_audit
from tests.support.agents import agent_workflow

B2_EXAMPLES = int(os.environ.get("AGENTFLOW_B2_EXAMPLES") or 300)
B2_STEPS = 50
WORKERS = ("w1", "w2", "w3")
ACCOUNTS = ("a", "b")
TOPIC = "b2.in"
LEASE_TTL = 30.0  # never lapses by itself during an example: only "advance time" lapses it
MAX_RESCUES = 3

T = TypeVar("T")

B2_TOOLS = ToolRegistry()
_PLAN = {"fail": False}


@agentflow.tool(name="b2_step", registry=B2_TOOLS)
async def b2_step(ctx: StepContext) -> dict[str, Any]:
    """The structured workflow's work: fails (retryably) when the machine says so."""
    if _PLAN["fail"]:
        raise RuntimeError(f"planned failure of attempt {ctx.attempt}")
    return {"seq": ctx.step_seq, "attempt": ctx.attempt}


FLOW: dict[str, Any] = {
    "name": "b2-flow",
    "kind": "structured",
    "trigger": {"topics": [TOPIC], "enrollment": {"key": "{{ event.data.account }}"}},
    "retry": {"max_attempts": 2, "initial_delay": "10m", "jitter": 0},
    "nodes": [
        {"id": "work", "type": "tool", "tool": "b2_step"},
        {"id": "nap", "type": "wait", "duration": "1h"},
        {"id": "done", "type": "finish", "output": {"work": "{{ steps.work }}"}},
    ],
}
AGENT = agent_workflow("b2-agent", approvals=["create_task"])


def scripted(request: ModelRequest) -> Message:
    """Ask for one task (which needs approval), then complete: a function of the request only,
    so that hypothesis can replay an example exactly."""
    if any(m.role == "assistant" and m.tool_calls for m in request.messages):
        return Message("assistant", "", (ToolCall("c2", "complete", {"summary": "done"}),))
    return Message("assistant", "", (ToolCall("c1", "create_task", {"title": "call the customer back"}),))


@dataclass
class MachineEnv:
    """What every example shares: the event loop the engine's pool lives on, the engine, the
    environments steps run in."""

    loop: asyncio.AbstractEventLoop
    engine: Engine
    nodes: NodeEnv
    agents: AgentEnv
    steps: int = 0
    examples: int = 0
    checks: int = 0
    rules: dict[str, int] = field(default_factory=dict)
    writes: Counter[str] = field(default_factory=Counter)  # fenced write attempts: current / stale
    violations: list[str] = field(default_factory=list)  # every one found, even if a replay differs


@dataclass
class Claim:
    """What a simulated worker believes it holds."""

    run: RunRecord
    token: int
    inbox_seq: int
    cursor: step.Cursor | None = None


class Violation(AssertionError):
    """An invariant of the run lifecycle does not hold."""


class Lifecycle(RuleBasedStateMachine):
    """The run lifecycle under arbitrary interleavings (see the module docstring).

    No rule has a precondition: what a rule can act on comes from the database, and
    hypothesis must draw the same choices when it replays an example, so a rule with nothing
    to act on does nothing instead.
    """

    env: ClassVar[MachineEnv]
    checkpoint: ClassVar[Callable[..., Awaitable[checkpoints.Checkpointed | None]]] = staticmethod(
        runs.checkpoint
    )

    def __init__(self) -> None:
        super().__init__()
        self.env.examples += 1
        self.pool = self.env.engine.db.pool
        self.ws = uuid.uuid4()
        self.claims: dict[str, dict[UUID, Claim]] = {w: {} for w in WORKERS}
        self.token: dict[UUID, int] = {}  # the latest fencing token the store handed out, per run
        self.stored: dict[str, int] = {}  # message id -> seq of the stored event
        self.decided: set[UUID] = set()
        self.undispatched = 0  # events published and not yet through the dispatcher
        self.run_ids: list[UUID] = []
        self.active_ids: list[UUID] = []
        self.failed_ids: list[UUID] = []
        self.pending_approvals: list[UUID] = []
        self.approval_ids: list[UUID] = []
        self.audited = 0
        self.configs = ConfigCache(self.pool)
        self.workflows: dict[str, UUID] = {}
        self.call(self._setup())

    # Plumbing --------------------------------------------------------------------------

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the engine's event loop; return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.env.loop).result(60)

    def count(self, name: str) -> None:
        self.env.steps += 1
        self.env.rules[name] = self.env.rules.get(name, 0) + 1

    async def _setup(self) -> None:
        engine = self.env.engine
        await self.pool.execute("INSERT INTO workspaces (id, name) VALUES ($1, $2)", self.ws, f"b2-{self.ws}")
        for config in (FLOW, AGENT):
            published = await engine.publish_workflow(config, workspace_id=self.ws)
            self.workflows[config["name"]] = published.workflow.id
        self.consumer = EventConsumer(
            engine.db, f"b2-{self.ws}", Dispatcher(engine.db).handle, workspace_id=self.ws, batch_size=4
        )

    def teardown(self) -> None:
        # Everything of the example goes with its workspace (every table cascades from it).
        self.call(self.pool.execute("DELETE FROM workspaces WHERE id = $1", self.ws))

    def saw(self, record: RunRecord) -> None:
        """A write returned this run: its token is now the latest handed out."""
        self.token[record.id] = record.fencing_token

    def current(self, claim: Claim) -> bool:
        return self.token.get(claim.run.id, 0) == claim.token

    def fenced_write(self, what: str, worker: str, claim: Claim, accepted: bool) -> None:
        """A fenced write answered ``accepted``: it must be iff the claim is current."""
        self.env.writes["current" if self.current(claim) else "stale"] += 1
        self.env.writes[f"{what.split()[0]}:{'current' if self.current(claim) else 'stale'}"] += 1
        if accepted and not self.current(claim):
            found = (
                f"stale write accepted: {what} by {worker} with token {claim.token} on run"
                f" {claim.run.id}, whose latest token is {self.token.get(claim.run.id, 0)}"
            )
            self.env.violations.append(found)
            raise Violation(found)
        if not accepted and self.current(claim):
            raise Violation(f"{what} by {worker}, the current holder (token {claim.token}), refused")

    def pick(self, items: list[UUID], index: int) -> UUID | None:
        return items[index % len(items)] if items else None

    # Events and starts -----------------------------------------------------------------

    @initialize(flows=st.integers(0, 2), agents=st.integers(0, 2))
    def begin_with_runs(self, flows: int, agents: int) -> None:
        """Some runs to work on from the first step (more come from rules)."""
        for n in range(flows + agents):
            self.start(ACCOUNTS[n % 2] if n < flows else None, n >= flows)

    @rule(account=st.sampled_from(ACCOUNTS), n=st.integers(0, 5))
    def ingest(self, account: str, n: int) -> None:
        """Publish an event; a message id seen before is a re-post and must get the original."""
        self.count("ingest")
        message_id = f"m{n}"
        (published,) = self.call(
            self.env.engine.events.publish(
                [{"topic": TOPIC, "message_id": message_id, "data": {"account": account}}],
                workspace_id=self.ws,
            )
        )
        first = self.stored.get(message_id)
        if first is None:
            if not published.created:
                raise Violation(f"first post of {message_id} answered as a repeat")
            self.stored[message_id] = published.event.seq
            self.undispatched += 1
        elif published.created or published.event.seq != first:
            raise Violation(f"re-post of {message_id} stored again or answered with another event")

    @rule()
    def dispatch(self) -> None:
        """One dispatcher batch (start a run per event, or enroll it into the key's run)."""
        if self.undispatched <= 0:
            return
        self.count("dispatch")
        self.undispatched -= self.call(self.consumer.consume_batch())

    @rule(account=st.sampled_from((*ACCOUNTS, None)), agent=st.booleans())
    def start(self, account: str | None, agent: bool) -> None:
        """Start a run directly (the API's way), with an enrollment key or none."""
        if len(self.active_ids) >= 6:
            return
        self.count("start")
        name = "b2-agent" if agent else "b2-flow"
        try:
            record = self.call(
                self.env.engine.start_run(
                    name, {"account": account}, enrollment_key=account, workspace_id=self.ws
                )
            )
        except ConflictError as exc:
            if exc.code != "run_already_active":
                raise
            return
        self.saw(record)

    # Workers ---------------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 3), load=st.booleans())
    def claim(self, worker: str, limit: int, load: bool = False) -> None:
        """Claim due runs (rescuing lapsed leases); with ``load``, also load and begin each at
        once, as the worker's loop does (else that happens at the claim's first step)."""
        self.count("claim")
        for item in self.call(runs.claim(self.pool, worker, limit, LEASE_TTL, MAX_RESCUES)):
            if item.run.workspace_id != self.ws:
                raise Violation(f"claimed a run of another workspace: {item.run.id}")
            self.saw(item.run)
            if item.run.status == RunStatus.IN_PROGRESS:
                claim = Claim(item.run, item.run.fencing_token, item.inbox_seq)
                self.claims[worker][item.run.id] = claim
                if load:
                    self.call(self._load(worker, claim))

    def held(self, who: int, which: int) -> tuple[str, Claim]:
        """One claim of a worker that holds some (chosen by position: a replay chooses alike)."""
        holders = [w for w in WORKERS if self.claims[w]]
        worker = holders[who % len(holders)]
        claims = list(self.claims[worker].values())
        return worker, claims[which % len(claims)]

    @rule(who=st.integers(0, 2), which=st.integers(0, 3), fail=st.booleans(), steps=st.integers(1, 3))
    def execute(self, who: int, which: int, fail: bool, steps: int) -> None:
        """A worker executes the next ``steps`` steps of one of its claims, checkpointing each
        (while it still holds it), as its loop does; a worker that holds none claims one first."""
        if not any(self.claims.values()):
            self.claim(WORKERS[who], 1)
            if not any(self.claims.values()):
                return
        worker, claim = self.held(who, which)
        _PLAN["fail"] = fail
        for _ in range(steps):
            self.count("execute")
            self.call(self._execute(worker, claim))
            if self.claims[worker].get(claim.run.id) is not claim:
                break

    async def _load(self, worker: str, claim: Claim) -> bool:
        """Load what the claim's first step needs and begin it, as the worker does after its
        claim; False (and the claim dropped) when the lease was lost meanwhile."""
        run = claim.run
        config = await self.configs.get(run.workspace_id, run.workflow_id, run.workflow_version)
        agent = isinstance(config, AgentConfig)
        outputs = await reads.step_outputs(self.pool, self.ws, run.id) if run.step_seq and not agent else {}
        pending = await inbox.load(self.pool, self.ws, run.id) if claim.inbox_seq else EMPTY
        claim.cursor = step.Cursor.of(run, outputs, pending)
        begin = getattr(runs, "begin", None)  # the working tree's worker marks the step begun
        if begin is not None:
            began = await begin(self.pool, self.ws, run.id, claim.token, worker)
            self.fenced_write("begin", worker, claim, began)
            if not began:
                del self.claims[worker][run.id]
                return False
        return True

    async def _execute(self, worker: str, claim: Claim) -> None:
        run = claim.run
        config = await self.configs.get(run.workspace_id, run.workflow_id, run.workflow_version)
        if claim.cursor is None and not await self._load(worker, claim):
            return
        assert claim.cursor is not None
        outcome = await (
            agent_step.execute(config, run, claim.cursor, self.env.agents, claim.token)
            if isinstance(config, AgentConfig)
            else step.execute(config, run, claim.cursor, self.env.nodes, claim.token)
        )
        done = await type(self).checkpoint(
            self.pool, self.ws, run.id, claim.token, worker, outcome.run, outcome.step, outcome.effects
        )
        self.fenced_write(f"checkpoint of step {outcome.step.seq}", worker, claim, done is not None)
        if done is None:
            del self.claims[worker][run.id]
            return
        claim.cursor = claim.cursor.after(outcome)
        status = RunStatus(done.status)
        if done.cancel_requested and not status.is_terminal:
            finished = await runs.finish_cancel(self.pool, self.ws, run.id, claim.token, worker)
            self.fenced_write("cancel at a checkpoint", worker, claim, finished)
            del self.claims[worker][run.id]
        elif status != RunStatus.IN_PROGRESS:
            del self.claims[worker][run.id]  # waiting, suspended or ended: the lease is gone
        elif done.inbox_seq > claim.cursor.inbox.seen:
            fresh = await inbox.load(self.pool, self.ws, run.id)
            claim.cursor = replace(claim.cursor, inbox=fresh)

    @rule(worker=st.sampled_from(WORKERS))
    def heartbeat(self, worker: str) -> None:
        """Extend the worker's leases: only current claims may be kept."""
        held = list(self.claims[worker].values())
        if not held:
            return
        self.count("heartbeat")
        kept = self.call(
            runs.heartbeat(self.pool, worker, [(self.ws, c.run.id, c.token) for c in held], LEASE_TTL)
        )
        for claim in held:
            self.fenced_write("heartbeat", worker, claim, claim.run.id in kept)

    @rule(who=st.integers(0, 2), which=st.integers(0, 3))
    def release(self, who: int, which: int) -> None:
        """A worker gives a claim back (graceful stop)."""
        if not any(self.claims.values()):
            return
        self.count("release")
        worker, claim = self.held(who, which)
        del self.claims[worker][claim.run.id]
        released = self.call(runs.release(self.pool, self.ws, claim.run.id, claim.token, worker))
        self.fenced_write("release", worker, claim, released)

    @rule(who=st.integers(0, 2), which=st.integers(0, 3), take_over=st.booleans(), load=st.booleans())
    def stall(self, who: int, which: int, take_over: bool, load: bool) -> None:
        """One worker stalls (a pause, a frozen process) past its lease on one run: that lease
        lapses while the worker still believes it holds the run, and will act on it later;
        with ``take_over`` another worker claims meanwhile (a rescue, usually of that run)."""
        if not any(self.claims.values()):
            return
        self.count("stall")
        worker, claim = self.held(who, which)
        self.call(
            self.pool.execute(
                "UPDATE runs SET due_at = due_at - make_interval(secs => $3),"
                " lease_expires_at = lease_expires_at - make_interval(secs => $3)"
                " WHERE workspace_id = $1 AND id = $2 AND lease_owner IS NOT NULL",
                self.ws,
                claim.run.id,
                LEASE_TTL + 1,
            )
        )
        if take_over:
            self.claim(WORKERS[(WORKERS.index(worker) + 1 + who % 2) % len(WORKERS)], 1, load)

    @rule(worker=st.sampled_from(WORKERS))
    def crash(self, worker: str) -> None:
        """The worker process dies: it forgets its claims; their leases lapse in time."""
        if not self.claims[worker]:
            return
        self.count("crash")
        self.claims[worker] = {}

    # Time and people -------------------------------------------------------------------

    @rule(seconds=st.sampled_from((31.0, 3601.0, 8 * 86400.0)))
    def advance_time(self, seconds: float) -> None:
        """Move every due time and deadline of the workspace back (the clock cannot move)."""
        self.count("advance_time")

        async def travel() -> None:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "UPDATE runs SET due_at = due_at - make_interval(secs => $2),"
                    " lease_expires_at = lease_expires_at - make_interval(secs => $2) WHERE workspace_id = $1",
                    self.ws,
                    seconds,
                )
                await conn.execute(
                    "UPDATE requests SET expires_at = expires_at - make_interval(secs => $2),"
                    " created_at = created_at - make_interval(secs => $2) WHERE workspace_id = $1",
                    self.ws,
                    seconds,
                )

        self.call(travel())

    @rule(index=st.integers(0, 7), approve=st.booleans(), pending=st.booleans())
    def decide(self, index: int, approve: bool, pending: bool) -> None:
        """A person decides an approval (mostly a pending one); a second decision must not be
        taken (G7)."""
        approval_id = self.pick(self.pending_approvals if pending else self.approval_ids, index)
        approval_id = approval_id or self.pick(self.approval_ids, index)
        if approval_id is None:
            return
        self.count("decide")
        status = "approved" if approve else "rejected"
        taken = self.call(approvals.decide(self.pool, self.ws, approval_id, status, None, "b2", None))
        if taken and approval_id in self.decided:
            raise Violation(f"approval {approval_id} decided twice")
        if taken:
            self.decided.add(approval_id)

    @rule(index=st.integers(0, 7), active=st.booleans())
    def cancel(self, index: int, active: bool) -> None:
        """Cancel a run (mostly an active one): at once, or at its holder's next checkpoint."""
        run_id = self.pick(self.active_ids if active else self.run_ids, index) or self.pick(
            self.run_ids, index
        )
        if run_id is None:
            return
        self.count("cancel")
        record = self.call(runs.cancel(self.pool, self.ws, run_id, "canceled_by_request"))
        if record is not None:
            self.saw(record)

    @rule(index=st.integers(0, 7), failed=st.booleans())
    def retry(self, index: int, failed: bool) -> None:
        """Retry a run (mostly a failed one) from its failed step."""
        run_id = self.pick(self.failed_ids if failed else self.run_ids, index) or self.pick(
            self.run_ids, index
        )
        if run_id is None:
            return
        self.count("retry")
        try:
            record = self.call(runs.retry(self.pool, self.ws, run_id))
        except asyncpg.UniqueViolationError:
            return  # another run holds its key now
        if record is not None:
            self.saw(record)

    # Invariants ------------------------------------------------------------------------

    @invariant()
    def lifecycle_holds(self) -> None:
        self.env.checks += 1
        self.call(self._check())

    async def _check(self) -> None:
        row = await self.pool.fetchrow(_INVARIANTS, self.ws, self.audited)
        assert row is not None
        state = {name: row[name] for name in ("changes", "runs", "approvals")}
        broken = {name: value for name, value in row.items() if name not in state and value}
        if broken:
            raise Violation(f"invariants broken: {broken}")
        for audit_id, run_id, status_from, status_to, reason in state["changes"]:
            self.audited = audit_id
            source, target = RunStatus(status_from), RunStatus(status_to)
            if not can_transition(source, target):
                raise Violation(f"run {run_id}: {source} -> {target} is not an allowed transition")
            if source == RunStatus.FAILED and reason != "retried":
                raise Violation(f"run {run_id} left failed other than by retry ({reason})")
        found = [(UUID(run_id), token, status, active) for run_id, token, status, active in state["runs"]]
        for run_id, token, _status, _active in found:
            if token != self.token.get(run_id, 0):
                raise Violation(
                    f"run {run_id}: token {token} in the database, but the last one handed out was"
                    f" {self.token.get(run_id, 0)}"
                )
        self.run_ids = [r[0] for r in found]
        self.active_ids = [r[0] for r in found if r[3]]
        self.failed_ids = [r[0] for r in found if r[2] == "failed"]
        self.approval_ids = [UUID(a) for a, _status in state["approvals"]]
        self.pending_approvals = [UUID(a) for a, status in state["approvals"] if status == "pending"]


# Each count must be 0; then the status changes recorded since the last check, the runs and
# the approvals (to check tokens and pick from). One statement: a check is one round trip.
_INVARIANTS = f"""
SELECT
  (SELECT count(*) FROM (SELECT 1 FROM runs WHERE workspace_id = $1 AND active AND enrollment_key IS NOT NULL
     GROUP BY workflow_id, enrollment_key HAVING count(*) > 1) k) AS keys_with_two_active_runs,
  (SELECT count(*) FROM (SELECT 1 FROM run_steps WHERE workspace_id = $1 AND status = 'completed'
     GROUP BY run_id, seq HAVING count(*) > 1) s) AS steps_checkpointed_twice,
  (SELECT count(*) FROM runs r WHERE r.workspace_id = $1 AND r.step_seq <> (SELECT count(DISTINCT seq)
     FROM run_steps s WHERE s.workspace_id = r.workspace_id AND s.run_id = r.id AND s.status = 'completed'
     AND s.seq < r.step_seq)) AS runs_missing_a_checkpoint,
  (SELECT count(*) FROM run_steps s JOIN runs r ON r.workspace_id = s.workspace_id AND r.id = s.run_id
     WHERE s.workspace_id = $1 AND (s.seq > r.step_seq
       OR (s.status = 'completed' AND s.seq >= r.step_seq))) AS checkpoints_beyond_the_run,
  (SELECT count(*) FROM run_steps s JOIN runs r ON r.workspace_id = s.workspace_id AND r.id = s.run_id
     WHERE s.workspace_id = $1 AND s.fencing_token > r.fencing_token) AS steps_with_a_future_token,
  (SELECT count(*) FROM runs WHERE workspace_id = $1 AND status NOT IN ('in_progress') AND lease_owner IS NOT NULL)
     AS leases_on_runs_not_in_progress,
  (SELECT count(*) FROM (SELECT 1 FROM events WHERE workspace_id = $1 GROUP BY topic, message_id
     HAVING count(*) > 1) e) AS events_stored_twice,
  (SELECT count(*) FROM (SELECT 1 FROM dispatch_decisions WHERE workspace_id = $1
     GROUP BY workflow_id, event_topic, event_message_id HAVING count(*) > 1) d) AS events_decided_twice,
  (SELECT count(*) FROM dispatch_decisions d WHERE d.workspace_id = $1 AND d.decision = 'started'
     AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.workspace_id = d.workspace_id AND r.id = d.run_id))
     AS started_runs_missing,
  (SELECT count(*) FROM (SELECT 1 FROM dispatch_decisions WHERE workspace_id = $1 AND decision = 'started'
     GROUP BY run_id HAVING count(*) > 1) x) AS runs_started_twice,
  (SELECT count(*) FROM (SELECT 1 FROM requests WHERE workspace_id = $1
     GROUP BY run_id, step_seq, arguments_hash HAVING count(*) > 1) a) AS approvals_requested_twice,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(id, run_id, status_from, status_to, reason) ORDER BY id), '[]')
     FROM {lifecycle_audit.TABLE} WHERE workspace_id = $1 AND id > $2) AS changes,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(id, fencing_token, status, active) ORDER BY created_at, id), '[]')
     FROM runs WHERE workspace_id = $1) AS runs,
  (SELECT coalesce(jsonb_agg(jsonb_build_array(id, status) ORDER BY created_at, id), '[]')
     FROM requests WHERE workspace_id = $1) AS approvals
"""


def _unfenced(sql: str) -> str:
    fence = "AND fencing_token = $3 AND lease_owner = $4"
    if fence not in sql:
        raise RuntimeError("the checkpoint statement changed: its fence was not found; update this control")
    return sql.replace(fence, "")


class _UnfencedPool:
    """A pool whose checkpoint statements lost their fencing condition (negative control)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        if "INSERT INTO run_steps" in sql:
            sql = _unfenced(sql)
        return await self._pool.fetchrow(sql, *args)


async def unfenced_checkpoint(
    pool: asyncpg.Pool, *args: Any, **kwargs: Any
) -> checkpoints.Checkpointed | None:
    """``runs.checkpoint`` without ``fencing_token = $3 AND lease_owner = $4``: a deliberately
    broken store function for the negative control."""
    return await runs.checkpoint(_UnfencedPool(pool), *args, **kwargs)  # type: ignore[arg-type]


class UnfencedLifecycle(Lifecycle):
    """The same machine against the unfenced checkpoint."""

    checkpoint = staticmethod(unfenced_checkpoint)


def _machine_env(engine: Engine) -> MachineEnv:
    loop = asyncio.get_running_loop()
    threads = ToolThreads()
    model = ScriptedProvider(scripted)
    agents = build_agent_env(engine.db, engine.settings, B2_TOOLS, threads, model=model)
    return MachineEnv(loop, engine, NodeEnv(B2_TOOLS, threads, {}), agents)


NEGATIVE_CONTROL_SEED = 886709789
"""A seed whose examples reach a stale checkpoint within a few (6): the negative control proves
the checks catch the unfenced checkpoint, it does not explore (a random seed sometimes needed
hundreds of examples, minutes on a loaded machine, against its timeout)."""


def _seed(default: int | None = None) -> int:
    chosen = os.environ.get("AGENTFLOW_B2_SEED") or default
    value = int(chosen or random.SystemRandom().randrange(1, 2**32))
    print(f"\nB2 seed={value} (rerun with AGENTFLOW_B2_SEED={value})")
    return value


def _run(machine: type[Lifecycle], seed_value: int, **overrides: Any) -> None:
    options: dict[str, Any] = {
        "max_examples": B2_EXAMPLES,
        "stateful_step_count": B2_STEPS,
        "deadline": None,
        "database": None,
        "report_multiple_bugs": False,
        "suppress_health_check": list(HealthCheck),
        **overrides,
    }
    run_state_machine_as_test(seed(seed_value)(machine), settings=settings(**options))


EVERY_RULE = (
    "ingest", "dispatch", "start", "claim", "execute", "heartbeat", "release", "stall", "crash",
    "advance_time", "cancel", "retry",
)  # fmt: skip
TOP_UP_EXAMPLES = 100
TIMEOUT_S = 300
TOP_UP_DEADLINE_S = 250.0
"""A top-up must end by this much of the test's time, well inside its timeout: each is sized
by the pace of the examples so far (a slower CPU once spent 159 s on the first pass alone, and
a fixed budget of 120 s then left no room for any top-up)."""


def _top_up_size(env: MachineEnv, started: float) -> int:
    """How many examples a top-up may run and still end by ``TOP_UP_DEADLINE_S``."""
    spent = time.monotonic() - started
    pace = spent / max(env.examples, 1)
    return min(TOP_UP_EXAMPLES, int((TOP_UP_DEADLINE_S - spent) / max(pace, 1e-3)))


def _shortfalls(env: MachineEnv) -> list[str]:
    """What the session has not yet explored enough, by the thresholds the test asserts.

    How many stale writes and heartbeats a random session makes depends on timing as well as
    on the seed (CI once: 15 stale writes and 19 heartbeats where the same seed gave more
    here), so a session that falls short is topped up rather than judged on too little.
    """
    short = [f"{name}<20" for name in EVERY_RULE if env.rules.get(name, 0) < 20]
    short += ["decide<5"] if env.rules.get("decide", 0) < 5 else []
    short += ["stale<20"] if env.writes["stale"] < 20 else []
    short += ["current<500"] if env.writes["current"] < 500 else []
    short += ["checkpoint:stale<1"] if env.writes["checkpoint:stale"] < 1 else []
    return short + (["steps<1000"] if env.steps < 1000 else [])


@pytest.mark.timeout(TIMEOUT_S)
async def test_b2_lifecycle_invariants_hold_over_thousands_of_interleavings(engine: Engine) -> None:
    """Thousands of interleaved lifecycle steps (ingest, re-post, dispatch, start, claim,
    execute, crash, heartbeat, release, advance time, decide, cancel, retry) against the real
    store: no invariant of the module docstring is ever broken."""
    await lifecycle_audit.install(engine.db.pool)
    env = _machine_env(engine)
    Lifecycle.env = env
    started = time.monotonic()
    try:
        first = _seed()
        await asyncio.to_thread(_run, Lifecycle, first)
        if env.writes["checkpoint:stale"] == 0:
            # A random session sometimes never has a stalled holder checkpoint (CI once: 66
            # stale writes, none a checkpoint); the seed known to reach one within a few
            # examples makes sure the fenced checkpoint itself was tried with a stale token.
            await asyncio.to_thread(_run, Lifecycle, NEGATIVE_CONTROL_SEED, max_examples=30)
        top_ups = 0
        while (short := _shortfalls(env)) and (size := _top_up_size(env, started)) >= 10:
            top_ups += 1  # seeds follow from the first, so rerunning it replays the top-ups too
            print(f"B2 top-up seed={first + top_ups} ({size} examples) for {short}")
            await asyncio.to_thread(_run, Lifecycle, first + top_ups, max_examples=size)
    finally:
        await env.agents.aclose()
    elapsed = time.monotonic() - started
    print(
        f"B2: {env.examples} examples, {env.steps} steps, {env.checks} invariant checks in {elapsed:.1f}s;"
        f" rules {dict(sorted(env.rules.items()))}; fenced writes {dict(env.writes)}"
    )
    assert env.steps >= 1000, "too few interleavings to mean anything"
    # Stale holders really tried to write (and were refused), current ones really wrote.
    assert env.writes["stale"] >= 20 and env.writes["current"] >= 500, env.writes
    assert env.writes["checkpoint:stale"] >= 1, env.writes
    # Every kind of step happened many times; deciding needs an agent run to have reached its
    # approval first, so it is rarer on a busy machine (13 in 326 examples once on CI).
    assert all(env.rules.get(name, 0) >= 20 for name in EVERY_RULE), env.rules
    assert env.rules.get("decide", 0) >= 5, env.rules


@pytest.mark.timeout(240)
async def test_b2_negative_control_finds_a_stale_write_through_an_unfenced_checkpoint(engine: Engine) -> None:
    """The same machine against a checkpoint without its fencing condition must find a stale
    write accepted (a worker whose lease lapsed and was taken over checkpoints anyway)."""
    await lifecycle_audit.install(engine.db.pool)
    env = _machine_env(engine)
    UnfencedLifecycle.env = env
    try:
        # Hypothesis replays the failing example to report it; the database it runs against has
        # moved on, so the replay may differ (FlakyStrategyDefinition): what the machine found
        # is recorded on env either way.
        with pytest.raises((Violation, hypothesis.errors.HypothesisException)):
            await asyncio.to_thread(
                _run,
                UnfencedLifecycle,
                _seed(NEGATIVE_CONTROL_SEED),
                max_examples=1000,
                phases=[Phase.generate],
            )
    finally:
        await env.agents.aclose()
    stale = [v for v in env.violations if v.startswith("stale write accepted")]
    assert stale, env.violations
    print(f"B2 negative control: found after {env.examples} examples ({env.steps} steps): {stale[0]}")


CANCEL_TOOLS = ToolRegistry()
_STEP_STARTED = asyncio.Event()


@agentflow.tool(name="slow_failure", registry=CANCEL_TOOLS)
async def slow_failure(ctx: StepContext) -> None:
    """Signal that the step began, take a moment, then fail (retryably)."""
    _STEP_STARTED.set()
    await asyncio.sleep(0.5)
    raise RuntimeError("planned failure")


async def test_a_cancel_requested_during_a_step_that_ends_in_a_wait_is_carried_out(engine: Engine) -> None:
    """A cancel requested while a step runs is carried out at that step's boundary, also when
    the step leaves the run waiting (here: a failure retried in an hour)."""
    await engine.publish_workflow(
        {
            "name": "cancel-at-boundary",
            "kind": "structured",
            "retry": {"max_attempts": 3, "initial_delay": "1h"},
            "nodes": [
                {"id": "work", "type": "tool", "tool": "slow_failure"},
                {"id": "done", "type": "finish"},
            ],
        }
    )
    _STEP_STARTED.clear()
    worker = engine.worker(concurrency=1, tools=CANCEL_TOOLS, dispatch=False)
    task = asyncio.create_task(worker.run())
    try:
        run = await engine.start_run("cancel-at-boundary")
        await asyncio.wait_for(_STEP_STARTED.wait(), 10)
        requested = await engine.cancel_run(run.id)
        assert requested.status == "in_progress"  # a live holder: canceled at its next boundary
        deadline = time.monotonic() + 5
        while (current := await engine.get_run(run.id)).status != "canceled" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
    assert (current.status, current.status_reason) == ("canceled", "canceled_by_request"), (
        f"still {current.status} ({current.status_reason}) although its cancel was requested during"
        " the step that has since ended"
    )
