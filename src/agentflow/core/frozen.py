"""``@frozen``: an immutable value class, checked by the type checker, cheap to build at run time.

``@dataclass(frozen=True)`` enforces immutability at run time by setting every field through
``object.__setattr__``; on this machine kind that makes building a 12-field value about 2.6 µs
against 0.36 µs for a plain dataclass. A step builds about twenty such values (its context,
its result, its transition, its checkpoint's writes), which was a tenth of a worker's CPU per
step (benchmarks/README.md, "Frozen values at the cost of plain ones").

A ``@frozen`` class is a dataclass the type checker treats as frozen (PEP 681's
``frozen_default``: assigning to a field is a type error, and ``mypy --strict`` runs on
``src/``), hashed by its fields as a frozen dataclass is, and built with plain attribute
stores. Change one with ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(cls: type[T]) -> type[T]:
    """Make ``cls`` an immutable value class (see the module's docstring).

    Args:
        cls: a class with annotated fields, as for ``dataclasses.dataclass``.

    Returns:
        The dataclass: compared and hashed by its fields (unless it defines ``__hash__``).
    """
    # A class that defines its own __hash__ keeps it, as a frozen dataclass would (one that
    # defines only __eq__ has __hash__ = None from Python: not its own, it gets the fields').
    return dataclasses.dataclass(unsafe_hash=cls.__dict__.get("__hash__") is None)(cls)
