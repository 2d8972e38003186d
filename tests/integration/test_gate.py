"""The event gate: asked outside any transaction, retried, and every verdict recorded with why;
agent workflows listen to their sources."""

from __future__ import annotations

from typing import Any

import asyncpg

from agentflow.engine import Engine
from agentflow.runtime.gatekeeper import MAX_ATTEMPTS, Gatekeeper, GateQuestion, GateVerdict
from tests.integration.test_dispatch import dispatch_all


def agent(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "agent", "prompt": "Start a get-well plan for accounts at risk", **extra}


class RuleGate:
    """Starts only high-priority events; checks no transaction is open while it is asked."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.questions: list[GateQuestion] = []
        self.open_transactions: list[int] = []

    async def decide(self, question: GateQuestion) -> GateVerdict:
        self.questions.append(question)
        conn = await asyncpg.connect(self.url)
        try:
            self.open_transactions.append(
                await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state LIKE 'idle in transaction%'"
                )
            )
        finally:
            await conn.close()
        high = question.event["data"].get("priority") == "high"
        return GateVerdict(high, "high priority" if high else "routine: no plan needed", {"model": "rules"})


class FlakyGate:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def decide(self, question: GateQuestion) -> GateVerdict:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("model provider unavailable")
        return GateVerdict(True, "fine")


async def decisions(engine: Engine) -> dict[str, dict[str, Any]]:
    rows = await engine.db.pool.fetch("SELECT event_message_id, decision, reason FROM dispatch_decisions")
    return {r["event_message_id"]: {"decision": r["decision"], "reason": r["reason"]} for r in rows}


async def test_the_gate_decides_outside_any_transaction_and_is_recorded(
    engine: Engine, database_url: str
) -> None:
    await engine.publish_workflow(
        agent("gated", type="account", sources=[{"type": "signal"}], gate={"instructions": "only real risk"})
    )
    await engine.events.publish(
        [
            {"topic": "signal.churn", "message_id": "hi", "data": {"account_id": "a1", "priority": "high"}},
            {"topic": "signal.churn", "message_id": "lo", "data": {"account_id": "a2", "priority": "low"}},
            {"topic": "email.received", "message_id": "mail", "data": {"account_id": "a1"}},
        ]
    )
    await dispatch_all(engine)
    pending = await decisions(engine)
    assert set(pending) == {"hi", "lo"}, "only the workflow's sources reach it"
    assert {d["decision"] for d in pending.values()} == {"gate_pending"}
    gate = RuleGate(database_url)
    # One request at a time, so that a transaction open during an ask can only be one held
    # across it (with two at once, one request's short decide transaction may overlap the
    # other's ask).
    keeper = Gatekeeper(engine.db, gate, owner="test", batch_size=1)
    assert [await keeper.work_once() for _ in range(3)] == [1, 1, 0], "each request is decided once"
    assert gate.open_transactions == [0, 0], "nothing holds a transaction while the gate thinks"
    assert {q.instructions for q in gate.questions} == {"only real risk"}
    assert {q.prompt for q in gate.questions} == {"Start a get-well plan for accounts at risk"}
    final = await decisions(engine)
    assert final["lo"]["decision"] == "gate_declined"
    assert final["lo"]["reason"]["gate"] == {
        "start": False,
        "reason": "routine: no plan needed",
        "model": "rules",
    }
    # Approved: it goes on to start the agent run.
    assert final["hi"]["decision"] == "started"
    assert final["hi"]["reason"]["gate"]["reason"] == "high priority"
    assert final["hi"]["reason"]["conditions"] is None
    verdicts = await engine.db.pool.fetch("SELECT status, verdict, due_at FROM gate_requests")
    assert all(r["status"] == "decided" and r["due_at"] is None for r in verdicts)


async def test_a_failing_gate_is_retried_then_on_error_decides(engine: Engine) -> None:
    await engine.publish_workflow(agent("skips", sources=[{"type": "note"}], gate={}))
    await engine.publish_workflow(agent("starts", sources=[{"type": "note"}], gate={"on_error": "start"}))
    await engine.events.publish([{"topic": "note.added", "message_id": "n1", "data": {"account_id": "a"}}])
    await dispatch_all(engine)
    gate = FlakyGate(failures=100)
    keeper = Gatekeeper(engine.db, gate, owner="test")
    for attempt in range(1, MAX_ATTEMPTS + 1):
        assert await keeper.work_once() == 2, attempt
        await engine.db.pool.execute("UPDATE gate_requests SET due_at = now() WHERE status = 'pending'")
        states = await engine.db.pool.fetch("SELECT attempts, status, verdict FROM gate_requests")
        if attempt < MAX_ATTEMPTS:
            assert [r["status"] for r in states] == ["pending", "pending"]
            assert all(r["verdict"]["last_error"]["message"] == "model provider unavailable" for r in states)
    assert gate.calls == 2 * MAX_ATTEMPTS
    rows = await engine.db.pool.fetch(
        "SELECT w.name, d.decision, d.reason FROM dispatch_decisions d JOIN workflows w ON w.id = d.workflow_id"
    )
    by_name = {r["name"]: r for r in rows}
    assert by_name["skips"]["decision"] == "gate_declined"
    assert by_name["skips"]["reason"]["gate"]["error"] == "gate_failed"
    assert by_name["starts"]["decision"] == "started", "on_error: start goes on"


async def test_a_gate_that_recovers_is_not_double_counted(engine: Engine) -> None:
    await engine.publish_workflow(agent("recovers", sources=[{"type": "note"}], gate={}))
    await engine.events.publish([{"topic": "note.added", "message_id": "n1", "data": {}}])
    await dispatch_all(engine)
    keeper = Gatekeeper(engine.db, FlakyGate(failures=1), owner="test")
    await keeper.work_once()
    await engine.db.pool.execute("UPDATE gate_requests SET due_at = now() WHERE status = 'pending'")
    await keeper.work_once()
    (row,) = await engine.db.pool.fetch("SELECT attempts, status, verdict FROM gate_requests")
    assert (row["attempts"], row["status"], row["verdict"]["reason"]) == (2, "decided", "fine")


async def test_without_a_gate_the_workflow_policy_applies_at_once(engine: Engine) -> None:
    await engine.publish_workflow(agent("nogate", sources=[{"type": "email"}], gate={}))
    await engine.events.publish([{"topic": "email.x", "message_id": "e", "data": {}}])
    await dispatch_all(engine)
    assert await Gatekeeper(engine.db, None, owner="test").work_once() == 1
    (row,) = (await decisions(engine)).values()
    assert row["decision"] == "gate_declined" and row["reason"]["gate"]["error"] == "gate_unavailable"


async def test_a_lapsed_claim_decides_nothing(engine: Engine) -> None:
    await engine.publish_workflow(agent("lapsed", sources=[{"type": "email"}], gate={}))
    await engine.events.publish([{"topic": "email.x", "message_id": "e", "data": {"priority": "high"}}])
    await dispatch_all(engine)

    class SlowGate:
        async def decide(self, question: GateQuestion) -> GateVerdict:
            # Meanwhile the lease lapses and another worker claims the request.
            await engine.db.pool.execute("UPDATE gate_requests SET due_at = now()")
            assert await Gatekeeper(engine.db, FlakyGate(0), owner="other").work_once() == 1
            return GateVerdict(False, "too late")

    await Gatekeeper(engine.db, SlowGate(), owner="slow").work_once()
    (row,) = (await decisions(engine)).values()
    assert row["decision"] == "started", "the live claim's verdict (start) counts, not the lapsed one's"
    assert row["reason"]["gate"]["reason"] == "fine"


async def test_a_gated_run_continues_the_trace_its_event_was_published_in(
    engine: Engine, database_url: str
) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    await engine.publish_workflow(agent("gated", type="account", sources=[{"type": "signal"}], gate={}))
    application = TracerProvider().get_tracer("the-application")
    with application.start_as_current_span("churn detector") as detector:
        await engine.events.publish(
            [{"topic": "signal.churn", "message_id": "hi", "data": {"account_id": "a1", "priority": "high"}}]
        )
    await dispatch_all(engine)
    assert await Gatekeeper(engine.db, RuleGate(database_url), owner="test").work_once() == 1
    (run,) = await engine.list_runs(workflow="gated")
    found = detector.get_span_context()
    assert (
        run.trace_parent == f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"
    ), "with tracing off here, the run still joins the publisher's trace"
