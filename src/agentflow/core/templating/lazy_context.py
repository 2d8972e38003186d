"""A template context whose names are worked out when a template first reads them.

A step's context (``payload``, ``input``, ``steps``, ``state``, ``inbox``, ``run``) costs about
7 µs to build, a fifth of a trivial step's execution, and most steps render nothing: their
arguments hold no template (benchmarks/README.md, "A step without a timer or a context it
does not read").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any


class LazyContext(Mapping[str, Any]):
    """The names templates see, each made by its function on first read, then kept.

    Reads from a rendering thread may make a value twice; each is made from values that do
    not change during the step, so both are equal.
    """

    __slots__ = ("_made", "_makers")

    def __init__(self, makers: Mapping[str, Callable[[], Any]]) -> None:
        """Args:
        makers: each name's function, called with no argument the first time it is read.
        """
        self._makers = makers
        self._made: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        try:
            return self._made[name]
        except KeyError:
            value = self._made[name] = self._makers[name]()  # KeyError for a name it lacks
            return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)
