"""Comparing a candidate's decisions with recorded ones (``core.evals``), without a database."""

from __future__ import annotations

from agentflow.core.evals import Comparison, EvalSummary, Gate, calls_of, usd_of


def test_recorded_calls_and_cost_are_read_from_a_decisions_output_whatever_its_shape() -> None:
    output = {
        "tool_calls": [
            {"id": "c1", "name": "create_task", "arguments": {"title": "x"}},
            {"id": "c2"},
            "junk",
        ],
        "usage": {"usd_cost": 0.25},
    }
    assert calls_of(output) == (("create_task", {"title": "x"}),)
    assert (calls_of(None), calls_of({"tool_calls": None}), usd_of(output), usd_of("text"), usd_of({"usage": 3})) == (
        (), (), 0.25, 0.0, 0.0,
    )  # fmt: skip


def comparison(recorded: list[str], candidate: list[str], **extra: object) -> Comparison:
    return Comparison(
        "r",
        0,
        tuple((n, {}) for n in recorded),
        tuple((n, {}) for n in candidate),
        0.0,
        0.0,
        **extra,  # type: ignore[arg-type]
    )


def test_a_failed_candidate_agrees_on_nothing_and_the_gate_says_so() -> None:
    failed = comparison(["complete"], [], error="model_unknown: no such provider", final=True)
    assert not failed.same_tools and not failed.same_arguments and not failed.same_ending
    summary = EvalSummary(1, [failed])
    assert summary.failures == ["the candidate's model failed on 1 decision(s)"]
    assert summary.cost_ratio is None  # nothing recorded was paid for: no ratio, no cost gate
    assert summary.to_json()["same_outcome"] == 0.0


def test_arguments_count_only_when_the_tools_agree_and_an_empty_eval_passes() -> None:
    differs = Comparison(
        "r", 1, (("create_task", {"title": "a"}),), (("create_task", {"title": "b"}),), 0.1, 0.3
    )
    assert differs.same_tools and not differs.same_arguments and differs.same_ending
    summary = EvalSummary(1, [differs], Gate(min_agreement=1.0, max_cost_ratio=3.5))
    assert summary.cost_ratio is not None and round(summary.cost_ratio, 6) == 3.0 and summary.failures == []
    assert summary.to_json()["comparisons"][0]["recorded"] == [
        {"tool": "create_task", "arguments": {"title": "a"}}
    ]
    nothing = EvalSummary(0, [], Gate(min_agreement=0.9))
    assert (nothing.decisions, nothing.share("same_tools"), nothing.failures) == (0, 1.0, [])


def test_the_plan_a_replayed_decision_sees_is_the_last_one_made_before_it() -> None:
    from agentflow.agent.replay import plan_before
    from agentflow.core.agent_context import HistoryStep

    def planned(seq: int, plan: object) -> HistoryStep:
        return HistoryStep(seq, "agent.tool", "generate_plan", {}, {"call_id": "c", "result": {"plan": plan}})

    steps = [
        planned(1, {"steps": ["old"]}),
        HistoryStep(2, "agent.tool", "create_task", {}, {"result": {"plan": {"steps": ["not a plan"]}}}),
        planned(3, {"steps": ["new"]}),
        planned(4, "not a dict"),
    ]
    assert plan_before(steps) == {"steps": ["new"]}
    assert plan_before(steps[:1]) == {"steps": ["old"]} and plan_before([]) is None
