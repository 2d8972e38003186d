"""Parse the durations that configs and tools use ("90s", "1h30m", "7d", "PT5M", 2.5)."""

from __future__ import annotations

import re
from datetime import timedelta

MAX_DURATION = timedelta(days=3650)
"""The longest duration accepted anywhere (about ten years).

Far below ``timedelta``'s own limit (999,999,999 days, past which Python raises
``OverflowError``) and PostgreSQL's timestamp range, so ``now() + duration`` always works.
"""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_COMPACT = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
# ``Y`` is 365 days: that is how pydantic writes a timedelta of a year or more ("P1Y35D")
# in the stored config, which the worker reads back.
_ISO = re.compile(
    r"P(?:(?P<y>\d+(?:\.\d+)?)Y)?(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """Turn a duration into a ``timedelta``.

    Accepts seconds as a number, compact strings such as ``"500ms"``, ``"90s"``,
    ``"1h30m"`` or ``"7d"``, and ISO 8601 durations such as ``"PT5M"`` or ``"P1DT2H"``.

    Raises:
        ValueError: the value is negative, empty, not a duration, or longer than
            ``MAX_DURATION``.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError("a duration cannot be a boolean")
    elif isinstance(value, int | float):
        seconds = float(value)
    else:
        seconds = _parse_text(value.strip())
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"{value!r} is not a finite duration")
    if seconds < 0:
        raise ValueError(f"{value!r} is negative; durations must be zero or more")
    if seconds > MAX_DURATION.total_seconds():
        # Checked before building the timedelta, which would overflow past 999,999,999 days.
        raise ValueError(f"{_shown(value)} is too long; durations are at most 3650 days (10 years)")
    return timedelta(seconds=seconds)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _parse_text(text: str) -> float:
    if not text:
        raise ValueError("empty duration")
    if text.upper().startswith("P"):
        match = _ISO.fullmatch(text.upper())
        if match is None or not any(match.groupdict().values()):
            raise ValueError(f"{text!r} is not an ISO 8601 duration such as 'PT5M'")
        parts = {k: float(v) for k, v in match.groupdict().items() if v}
        return (
            parts.get("y", 0) * 365 * 86400
            + parts.get("w", 0) * 604800
            + parts.get("d", 0) * 86400
            + parts.get("h", 0) * 3600
            + parts.get("m", 0) * 60
            + parts.get("s", 0)
        )
    try:
        return float(text)
    except ValueError:
        pass
    compact = text.replace(" ", "").lower()
    pos, total = 0, 0.0
    for match in _COMPACT.finditer(compact):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(compact) or pos == 0:
        raise ValueError(f"{text!r} is not a duration; use forms like '90s', '1h30m', '7d' or 'PT5M'")
    return total


def format_duration(seconds: float) -> str:
    """Format seconds compactly for people ("1h30m", "2.5s", "120ms")."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    out, rest = [], round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out)
