"""Benchmark figures with their targets: the Rich table and the JSON document."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rich.table import Table

from agentflow.core.frozen import frozen


@frozen
class Target:
    """A goal for one figure, e.g. ``>= 550 runs/s`` or ``<= 3 ms``."""

    op: Literal["<=", ">="]
    value: float
    unit: str

    def met_by(self, value: float) -> bool:
        """True when ``value`` reaches the goal."""
        return value <= self.value if self.op == "<=" else value >= self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:g} {self.unit}"


@frozen
class Metric:
    """One measured figure.

    Attributes:
        name: what it is, e.g. ``p50 per step``.
        value: the figure, in ``unit``.
        unit: ``ms``, ``runs/s``, ``MB``, ...
        floor_ratio: the figure divided by the matching floor figure (None where a ratio
            means nothing, e.g. timer lateness).
        target: the goal, if the issue sets one.
    """

    name: str
    value: float
    unit: str
    floor_ratio: float | None = None
    target: Target | None = None

    @property
    def passed(self) -> bool | None:
        """Whether the target is met (None without a target)."""
        return None if self.target is None else self.target.met_by(self.value)

    def to_json(self) -> dict[str, Any]:
        """A JSON object (the target as text and as its parts)."""
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "floor_ratio": self.floor_ratio,
            "target": None if self.target is None else {**asdict(self.target), "text": str(self.target)},
            "passed": self.passed,
        }


@dataclass
class WorkloadResult:
    """The figures of one workload and how they were obtained.

    Attributes:
        key: ``W1`` .. ``W4-10k``, ``E1`` .. ``E3``.
        title: one line saying what the workload does.
        metrics: the figures, in display order.
        details: sizes, settings and counts (for the JSON document).
        error: why the workload could not finish, if it did not.
    """

    key: str
    title: str
    metrics: list[Metric] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def add(
        self,
        name: str,
        value: float,
        unit: str,
        *,
        floor: float | None = None,
        target: Target | None = None,
    ) -> None:
        """Append a figure; ``floor`` is the floor figure it is divided by."""
        ratio = value / floor if floor else None
        self.metrics.append(Metric(name, value, unit, ratio, target))

    def to_json(self) -> dict[str, Any]:
        """A JSON object."""
        return {
            "key": self.key,
            "title": self.title,
            "metrics": [m.to_json() for m in self.metrics],
            "details": self.details,
            "error": self.error,
        }


@dataclass
class Report:
    """A whole benchmark run: machine, floor, settings and each workload."""

    machine: dict[str, Any]
    floor: dict[str, Any]
    settings: dict[str, Any]
    workloads: list[WorkloadResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "machine": self.machine,
            "floor": self.floor,
            "settings": self.settings,
            "workloads": {w.key: w.to_json() for w in self.workloads},
        }

    def table(self) -> Table:
        """The Rich table: workload, metric, value, floor ratio, target, result."""
        table = Table(title="agentflow bench", title_justify="left")
        for name, justify in (
            ("workload", "left"),
            ("metric", "left"),
            ("value", "right"),
            ("× floor", "right"),
            ("target", "right"),
            ("result", "left"),
        ):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        table.add_row(
            "floor",
            "INSERT+COMMIT p50 / p99",
            f"{self.floor['commit_p50_ms']:.3f} / {self.floor['commit_p99_ms']:.3f} ms",
            "1",
            "",
            "",
        )
        for cpu_us, p50 in self.floor.get("paced_commit_p50_ms", {}).items():
            ratio = p50 / self.floor["commit_p50_ms"]
            table.add_row(
                "",
                f"INSERT+COMMIT p50 after {cpu_us} µs of CPU",
                f"{p50:.3f} ms",
                f"{format_number(ratio)}×",
                "",
                "",
            )
        for workload in self.workloads:
            if workload.error is not None:
                table.add_row(workload.key, f"[red]error: {workload.error}[/]", "", "", "", "[red]error[/]")
            for index, metric in enumerate(workload.metrics):
                table.add_row(
                    workload.key if index == 0 and workload.error is None else "",
                    metric.name,
                    f"{format_number(metric.value)} {metric.unit}",
                    "" if metric.floor_ratio is None else f"{format_number(metric.floor_ratio)}×",
                    "" if metric.target is None else str(metric.target),
                    {True: "[green]pass[/]", False: "[red]miss[/]", None: ""}[metric.passed],
                )
            table.add_section()
        return table


def format_number(value: float) -> str:
    """Three significant figures, without scientific notation for everyday sizes."""
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) >= 0.001 or value == 0 else f"{value:.2e}"
