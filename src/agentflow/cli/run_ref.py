"""Run ids as people type them: the whole id, or a unique prefix of it (at least 4 characters)."""

from __future__ import annotations

from uuid import UUID

from agentflow.core.errors import ConfigError, ConflictError, NotFoundError
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.store import run_ids

MIN_PREFIX = 4
_HEX = frozenset("0123456789abcdef")
_SHOWN = 5  # candidates listed in an ambiguity error


def prefix_range(text: str) -> tuple[UUID, UUID] | None:
    """The lowest and highest ids that start with ``text`` (any case, dashes where an id has
    them), or None when no id can start with it."""
    typed = text.strip().lower()
    digits = typed.replace("-", "")
    if not digits or len(digits) > 32 or not set(digits) <= _HEX:
        return None
    low, high = UUID(digits.ljust(32, "0")), UUID(digits.ljust(32, "f"))
    return (low, high) if str(low).startswith(typed) else None


async def resolve_run_id(engine: Engine, text: str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> UUID:
    """The id of the one run whose id is or starts with ``text``.

    Raises:
        NotFoundError: ``run_not_found``: no run id is or starts with it.
        ConfigError: ``run_id_invalid``: a prefix shorter than 4 characters.
        ConflictError: ``run_id_ambiguous``: several run ids start with it (they are listed).
    """
    found = prefix_range(text)
    if found is None:
        raise NotFoundError(
            "run_not_found",
            f"no run {text!r}: give a run id, or the start of one, as 'agentflow runs list' shows them",
        )
    low, high = found
    if low == high:  # a whole id
        return low
    if len(text.strip().replace("-", "")) < MIN_PREFIX:
        raise ConfigError(
            "run_id_invalid", f"{text!r} is too short: give at least {MIN_PREFIX} characters of a run id"
        )
    ids = await run_ids.with_prefix(engine.db.pool, workspace_id, low, high, _SHOWN + 1)
    if not ids:
        raise NotFoundError("run_not_found", f"no run id starts with {text!r}")
    if len(ids) > 1:
        listed = ", ".join(str(i) for i in ids[:_SHOWN]) + (", ..." if len(ids) > _SHOWN else "")
        raise ConflictError(
            "run_id_ambiguous",
            f"several run ids start with {text!r}: {listed}",
            solution="Give more characters of the id.",
        )
    return ids[0]
