"""Evals: how a candidate (a new version, another model) decides where recorded runs decided.

Each recorded decision of an agent run is asked again of the candidate with the context the
run had then (``agent.replay``); the two are compared here: the tools called, in order, and
their arguments, what each cost, and whether the candidate ends the run where it ended. The
summary's gate makes it a CI check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import Any

from agentflow.core.frozen import frozen

ENDING_TOOLS = frozenset({"complete"})


@frozen
class Comparison:
    """One recorded decision and the candidate's.

    Attributes:
        run_id / seq: the recorded decision's run and step.
        recorded / candidate: the tools called, in order, as ``(name, arguments)``.
        recorded_usd / candidate_usd: what each decision cost.
        final: it was the run's last recorded decision.
        error: why the candidate gave no decision (its model failed), if it did not.
    """

    run_id: str
    seq: int
    recorded: tuple[tuple[str, Any], ...]
    candidate: tuple[tuple[str, Any], ...]
    recorded_usd: float
    candidate_usd: float
    final: bool = False
    error: str | None = None

    @property
    def same_tools(self) -> bool:
        """The candidate called the same tools in the same order."""
        return self.error is None and [n for n, _ in self.recorded] == [n for n, _ in self.candidate]

    @property
    def same_arguments(self) -> bool:
        """... and with the same arguments."""
        return self.same_tools and [a for _, a in self.recorded] == [a for _, a in self.candidate]

    @property
    def same_ending(self) -> bool:
        """The candidate ends the run (calls ``complete``) exactly where it ended."""
        ends = self.error is None and any(n in ENDING_TOOLS for n, _ in self.candidate)
        return ends == any(n in ENDING_TOOLS for n, _ in self.recorded)

    def to_json(self) -> dict[str, Any]:
        """A JSON object."""
        return {
            "run_id": self.run_id,
            "seq": self.seq,
            "recorded": [{"tool": n, "arguments": a} for n, a in self.recorded],
            "candidate": [{"tool": n, "arguments": a} for n, a in self.candidate],
            "same_tools": self.same_tools,
            "same_arguments": self.same_arguments,
            "same_ending": self.same_ending,
            "recorded_usd": self.recorded_usd,
            "candidate_usd": self.candidate_usd,
            "error": self.error,
        }


def calls_of(output: Any) -> tuple[tuple[str, Any], ...]:
    """The tool calls a recorded ``agent.decide`` step made (its output's ``tool_calls``)."""
    calls = output.get("tool_calls") if isinstance(output, dict) else None
    return tuple(
        (str(c.get("name")), c.get("arguments")) for c in calls or () if isinstance(c, dict) and c.get("name")
    )


def usd_of(output: Any) -> float:
    """What a recorded ``agent.decide`` step's model call cost."""
    usage = output.get("usage") if isinstance(output, dict) else None
    return float(usage.get("usd_cost") or 0) if isinstance(usage, dict) else 0.0


@frozen
class Gate:
    """What the candidate must reach (None: not checked).

    Attributes:
        min_agreement: the share of decisions with the same tools, 0-1.
        max_cost_ratio: the candidate's cost over the recorded one.
    """

    min_agreement: float | None = None
    max_cost_ratio: float | None = None


@frozen
class EvalSummary:
    """The comparisons of an eval, added up, and whether they pass its gate."""

    runs: int
    comparisons: Sequence[Comparison]
    gate: Gate = field(default_factory=Gate)

    @property
    def decisions(self) -> int:
        """Recorded decisions asked again."""
        return len(self.comparisons)

    def share(self, attribute: str, among: Sequence[Comparison] | None = None) -> float:
        """The share of comparisons (of ``among``) for which ``attribute`` holds (1.0 of none)."""
        found = self.comparisons if among is None else among
        return sum(1 for c in found if getattr(c, attribute)) / len(found) if found else 1.0

    @property
    def cost_ratio(self) -> float | None:
        """The candidate's total cost over the recorded one (None when the recorded one is 0)."""
        recorded = sum(c.recorded_usd for c in self.comparisons)
        return sum(c.candidate_usd for c in self.comparisons) / recorded if recorded else None

    @property
    def failures(self) -> list[str]:
        """Why the gate is not met, one line a reason (empty: it passes)."""
        found = []
        agreement = self.share("same_tools")
        if self.gate.min_agreement is not None and agreement < self.gate.min_agreement:
            found.append(
                f"the same tools in {agreement:.0%} of decisions, below {self.gate.min_agreement:.0%}"
            )
        ratio = self.cost_ratio
        if self.gate.max_cost_ratio is not None and ratio is not None and ratio > self.gate.max_cost_ratio:
            found.append(f"cost {ratio:.2f}x the recorded, above {self.gate.max_cost_ratio:.2f}x")
        errors = sum(1 for c in self.comparisons if c.error)
        if errors:
            found.append(f"the candidate's model failed on {errors} decision(s)")
        return found

    def to_json(self) -> dict[str, Any]:
        """A JSON object: the totals, the gate's verdict, and every comparison."""
        finals = [c for c in self.comparisons if c.final]
        return {
            "runs": self.runs,
            "decisions": self.decisions,
            "same_tools": self.share("same_tools"),
            "same_arguments": self.share("same_arguments"),
            "same_ending": self.share("same_ending"),
            "same_outcome": self.share("same_ending", finals),
            "recorded_usd": sum(c.recorded_usd for c in self.comparisons),
            "candidate_usd": sum(c.candidate_usd for c in self.comparisons),
            "cost_ratio": self.cost_ratio,
            "passed": not self.failures,
            "failures": self.failures,
            "comparisons": [c.to_json() for c in self.comparisons],
        }
