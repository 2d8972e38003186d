"""Values worked out once per object and found again by the object's identity.

For what a worker derives from the same few long-lived objects at every step (a workflow
config's tool names, a tool schema's length), where the objects are not hashable (pydantic
models and dataclasses holding dicts). Each object is kept with its value, so its id cannot be
reused by another object while the entry lives; the memo is emptied when it is full.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityMemo(Generic[K, V]):
    """``make(key)``, remembered for ``key`` (the very object) while at most ``limit`` are kept.

    Args:
        make: works the value out.
        limit: objects remembered at most.
    """

    def __init__(self, make: Callable[[K], V], limit: int = 256) -> None:
        self._make = make
        self._limit = limit
        self._kept: dict[int, tuple[K, V]] = {}

    def __call__(self, key: K) -> V:
        """The value for ``key``, worked out the first time it is asked."""
        kept = self._kept.get(id(key))
        if kept is not None and kept[0] is key:
            return kept[1]
        value = self._make(key)
        if len(self._kept) >= self._limit:
            self._kept.clear()
        self._kept[id(key)] = (key, value)
        return value
