"""``@frozen`` values: equal and hashed by their fields, changed only through ``replace``,
and refused by the type checker when assigned to."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentflow.core.frozen import frozen


@frozen
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = dataclasses.field(default=())


@frozen
class Named:
    name: str
    note: str = ""

    def __hash__(self) -> int:  # its own: only the name counts
        return hash(self.name)


def test_a_value_is_equal_and_hashed_by_its_fields() -> None:
    a, b = Point(1, 2), Point(1, 2)
    assert a == b and hash(a) == hash(b)
    assert {a: "first"}[b] == "first"
    assert Point(1, 3) != a and len({a, b, Point(1, 3)}) == 2


def test_replace_makes_a_new_value_and_leaves_the_old_one() -> None:
    a = Point(1, 2)
    b = dataclasses.replace(a, y=5)
    assert (a.y, b.y, b.x) == (2, 5, 1)


def test_a_class_keeps_its_own_hash() -> None:
    assert hash(Named("a", "one")) == hash(Named("a", "two")) == hash("a")
    assert Named("a", "one") != Named("a", "two")


def test_a_class_with_its_own_eq_is_still_hashed_by_its_fields() -> None:
    @frozen
    class Loose:
        name: str

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Loose) and self.name.lower() == other.name.lower()

    assert Loose("A") == Loose("a")
    assert hash(Loose("a")) == hash(Loose("a")) != hash(Loose("b"))


def test_a_list_field_makes_a_value_unhashable_as_a_frozen_dataclass_would() -> None:
    @frozen
    class Holder:
        items: list[int]

    with pytest.raises(TypeError, match="unhashable"):
        hash(Holder([1]))


def test_the_type_checker_refuses_an_assignment(tmp_path: Path) -> None:
    source = tmp_path / "uses_frozen.py"
    source.write_text(
        textwrap.dedent(
            """
            from agentflow.core.frozen import frozen

            @frozen
            class Point:
                x: int

            p = Point(1)
            p.x = 2
            """
        )
    )
    # In a process of its own: mypy raises the recursion limit of the process it runs in.
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "c"),
         str(source)],
        capture_output=True, text=True, check=False,
        env={**os.environ, "MYPYPATH": str(Path(__file__).parents[2] / "src")},
    )  # fmt: skip
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert 'Property "x" defined in "Point" is read-only' in checked.stdout
