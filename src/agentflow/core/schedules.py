"""Cron schedules: when a cron trigger fires, in its time zone, and what to start after an outage.

Pure functions over a validated ``CronSchedule``; the runtime keeps one cursor per schedule
(``last_fire``, from the database clock) and asks this module what to start and when to wake.
Cron expressions are evaluated by ``cronsim`` (see docs/decisions.md, "Cron schedules").

Expressions:
    Five fields ``minute hour day-of-month month day-of-week`` with lists, ranges, steps,
    month and weekday names, ``L`` and ``LW`` (last day / last weekday of the month),
    ``5L`` (last Friday) and ``MON#2`` (second Monday); plus the aliases ``@yearly``
    (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``) and ``@hourly``.
    As in Debian cron, when the day-of-month or the day-of-week field starts with ``*``
    a day must match both fields, otherwise either. Seconds fields are refused: the engine
    schedules at minute granularity.

Daylight saving time (Debian cron's rules, which cronsim implements):
    *Wall-clock jobs*, whose minute and hour fields are both explicit (``30 2 * * *``,
    ``0 9-17 * * 1-5``, ``@daily``), follow the local clock:

    - a local time that does not exist (spring forward) fires once, at the first valid
      instant after the gap: ``30 2 * * *`` in Europe/Berlin on 2024-03-31 fires at
      03:00 CEST (01:00 UTC);
    - a local time that happens twice (fall back) fires once, at its first occurrence:
      ``30 2 * * *`` in Europe/Berlin on 2024-10-27 fires at 02:30 CEST (00:30 UTC) only.

    *Interval jobs*, whose minute or hour field starts with ``*`` (``0 * * * *``,
    ``*/15 * * * *``, ``0 */2 * * *``), follow real time: they fire at every real instant
    whose local time matches, so an hourly job keeps firing every real hour (twice in the
    repeated local hour, never in the missing one), and a time that falls in the gap is
    skipped (``0 */2 * * *`` has no 02:00 run on a spring-forward day in New York).

    Known limitation (cronsim 2.8): in the two zones whose clocks change at a time that is
    not on the hour, Australia/Lord_Howe (30-minute shift) and Pacific/Chatham (at 02:45),
    an interval job with a stepped hour field (``0 */3 * * *``) can miss the fire of the
    first whole hour after the spring-forward gap. Wall-clock jobs are not affected.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from agentflow.core.frozen import frozen

CatchUpPolicy = Literal["skip", "once", "all"]

SKIP_GRACE = timedelta(seconds=60)
"""How late a fire may start under ``catch_up: skip`` and still count as on time."""

DUE_COUNT_LIMIT = 10_000
"""Most fire times ``plan_catch_up`` enumerates; beyond it ``due`` is a lower bound."""

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_HOST_DEPENDENT_ZONES = frozenset({"localtime", "posixrules"})
_PROBE_START = datetime(2000, 1, 1, tzinfo=UTC)


def _to_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_to_utc)]


class CronSchedule(BaseModel):
    """A cron trigger's schedule.

    Attributes:
        cron: a five-field cron expression or an ``@`` alias (see the module docstring).
        timezone: the IANA time zone the expression is read in, such as ``Europe/Berlin``.
        catch_up: what to start for fire times that passed while the engine was not
            looking (see ``plan_catch_up``): ``skip`` starts only an on-time fire,
            ``once`` one run for all of them, ``all`` one run each (up to ``max_catch_up``).
        max_catch_up: under ``all``, the most runs started at once; the oldest beyond it
            are dropped.
        start_at: no fire before this instant (inclusive).
        end_at: no fire after this instant (inclusive).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cron: str = Field(min_length=1, max_length=200)
    timezone: str = Field(default="UTC", min_length=1, max_length=100)
    catch_up: CatchUpPolicy = "skip"
    max_catch_up: int = Field(default=100, ge=1, le=10_000)
    start_at: UtcDatetime | None = None
    end_at: UtcDatetime | None = None

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, value: str) -> str:
        expression = expand_cron(value)
        try:
            probe = CronSim(expression, _PROBE_START)
        except CronSimError as exc:
            raise ValueError(f"invalid cron expression {value!r}: {_reason(exc)}") from None
        if next(probe, None) is None:
            raise ValueError(f"cron expression {value!r} never fires (no match within 50 years)")
        return value

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        hint = "use an IANA time zone name such as 'Europe/Berlin', 'America/New_York' or 'UTC'"
        if value in _HOST_DEPENDENT_ZONES:
            raise ValueError(f"time zone {value!r} depends on the host; {hint}")
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(f"unknown time zone {value!r}; {hint}") from None
        return value

    @model_validator(mode="after")
    def _check_bounds(self) -> CronSchedule:
        if self.start_at is not None and self.end_at is not None and self.end_at <= self.start_at:
            raise ValueError("end_at must be after start_at")
        return self

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's time zone."""
        return ZoneInfo(self.timezone)

    @property
    def expression(self) -> str:
        """The five-field expression evaluated (aliases expanded)."""
        return expand_cron(self.cron)


def expand_cron(text: str) -> str:
    """Normalise a cron expression: expand ``@`` aliases and collapse whitespace.

    Raises:
        ValueError: an unknown alias, ``@reboot``, or not five fields.
    """
    fields = text.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        alias = fields[0].lower()
        if alias == "@reboot":
            raise ValueError("'@reboot' is not a schedule; start the workflow from an event instead")
        if alias not in _ALIASES:
            raise ValueError(f"unknown cron alias {fields[0]!r}; known: {', '.join(_ALIASES)}")
        return _ALIASES[alias]
    if len(fields) != 5:
        raise ValueError(
            f"a cron expression has 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)} in {text!r}"
        )
    return " ".join(fields)


def _reason(exc: CronSimError) -> str:
    message = str(exc)  # cronsim says e.g. "Bad minute"
    return message[:1].lower() + message[1:] if message else "not a cron expression"


def _require_aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")
    return value.astimezone(UTC)


def iter_fires(schedule: CronSchedule, after: datetime) -> Iterator[datetime]:
    """Yield the schedule's fire times strictly after ``after``, in increasing order.

    Every value is an aware UTC datetime within ``[start_at, end_at]``; the iterator ends
    after ``end_at`` or when the expression has no match within 50 years.

    Raises:
        ValueError: ``after`` is naive.
    """
    previous = _require_aware(after, "after")
    cursor = previous
    if schedule.start_at is not None and cursor < schedule.start_at:
        # CronSim yields times strictly after its start; start just before start_at.
        cursor = schedule.start_at - timedelta(microseconds=1)
    sim = CronSim(schedule.expression, cursor.astimezone(schedule.zone))
    while True:
        try:
            local = next(sim)
        except (StopIteration, OverflowError):
            return
        fire = local.astimezone(UTC)
        # Wall-clock jobs are matched on naive local time, so a start inside a repeated
        # hour can yield that hour's first occurrence again, which is already past.
        if fire <= previous or (schedule.start_at is not None and fire < schedule.start_at):
            continue
        if schedule.end_at is not None and fire > schedule.end_at:
            return
        yield fire
        previous = fire


def next_fire(schedule: CronSchedule, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (aware, any zone), as aware UTC.

    Returns None when no fire remains: past ``end_at``, or no match within 50 years.
    See the module docstring for the daylight-saving rules.

    Raises:
        ValueError: ``after`` is naive.
    """
    return next(iter_fires(schedule, after), None)


@frozen
class CatchUpPlan:
    """What to start for a schedule at one instant.

    Attributes:
        fires: the fire times to start a run for now, ascending, aware UTC.
        due: fire times in ``(last_fire, now]``, whether started or not (a lower bound
            when ``counted_all`` is False).
        dropped: ``due - len(fires)``: fire times that get no run.
        counted_all: False when more than ``DUE_COUNT_LIMIT`` fire times were due and
            counting stopped there.
        cursor: the value to store as the schedule's ``last_fire`` once the runs are
            started: the latest due fire time, else the previous ``last_fire`` (``now``
            for a new schedule).
    """

    fires: tuple[datetime, ...]
    due: int
    dropped: int
    counted_all: bool
    cursor: datetime


def plan_catch_up(
    schedule: CronSchedule,
    last_fire: datetime | None,
    now: datetime,
    *,
    grace: timedelta = SKIP_GRACE,
) -> CatchUpPlan:
    """Decide which runs to start at ``now`` given the last fire time the engine recorded.

    The due fire times are those in ``(last_fire, now]`` (and within the schedule's
    bounds). The policy picks which of them start a run:

    - ``skip``: only the latest due fire, and only if it is at most ``grace`` (60 s by
      default) before ``now``; a fire the engine reaches later than that is dropped,
      as are all older ones. On-time runs, never late ones.
    - ``once``: the latest due fire, however late: one run stands for all missed ones.
    - ``all``: every due fire in order, keeping the latest ``max_catch_up`` and
      dropping older ones.

    A new schedule (``last_fire`` None) has nothing due: its first fire is the first one
    after ``now``, and ``cursor`` is ``now``. A ``now`` at or before ``last_fire`` (clock
    skew) has nothing due either.

    Both instants must be aware; use the database clock for ``now``.

    Raises:
        ValueError: a naive ``last_fire`` or ``now``.
    """
    now = _require_aware(now, "now")
    if last_fire is None:
        return CatchUpPlan(fires=(), due=0, dropped=0, counted_all=True, cursor=now)
    last_fire = _require_aware(last_fire, "last_fire")
    if now <= last_fire:
        return CatchUpPlan(fires=(), due=0, dropped=0, counted_all=True, cursor=last_fire)

    keep = schedule.max_catch_up if schedule.catch_up == "all" else 1
    recent: deque[datetime] = deque(maxlen=keep)
    due = 0
    counted_all = True
    for fire in iter_fires(schedule, last_fire):
        if fire > now:
            break
        if due == DUE_COUNT_LIMIT:
            # Too many to count cheaply: find the latest ones from the end instead.
            counted_all = False
            tail = _latest_fires(schedule, recent[-1], now, keep)
            due += len(tail)
            recent.extend(tail)
            break
        due += 1
        recent.append(fire)

    if not recent:
        return CatchUpPlan(fires=(), due=0, dropped=0, counted_all=True, cursor=last_fire)
    latest = recent[-1]
    if schedule.catch_up == "skip":
        fires: tuple[datetime, ...] = (latest,) if now - latest <= grace else ()
    else:
        fires = tuple(recent)
    return CatchUpPlan(fires=fires, due=due, dropped=due - len(fires), counted_all=counted_all, cursor=latest)


def due_fires(
    schedule: CronSchedule,
    last_fire: datetime | None,
    now: datetime,
    *,
    grace: timedelta = SKIP_GRACE,
) -> list[datetime]:
    """The fire times to start a run for at ``now``, ascending, aware UTC.

    Shorthand for ``plan_catch_up(...).fires``; see it for the policies, and for the
    cursor and the dropped count the runtime records.
    """
    return list(plan_catch_up(schedule, last_fire, now, grace=grace).fires)


def _latest_fires(schedule: CronSchedule, after: datetime, until: datetime, count: int) -> list[datetime]:
    """The latest ``count`` fire times in ``(after, until]``, ascending.

    Fires are at least a minute apart, so a window of ``count`` minutes holds about
    ``count`` of them; the window doubles backwards until it holds enough.
    """
    span = timedelta(minutes=count)
    while True:
        start = max(after, until - span)
        found: deque[datetime] = deque(maxlen=count)
        total = 0
        for fire in iter_fires(schedule, start):
            if fire > until:
                break
            found.append(fire)
            total += 1
        if total >= count or start == after:
            return list(found)
        span *= 2
