from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentflow.core import schedules
from agentflow.core.schedules import (
    DUE_COUNT_LIMIT,
    CronSchedule,
    due_fires,
    expand_cron,
    iter_fires,
    next_fire,
    plan_catch_up,
)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def fires(schedule: CronSchedule, after: datetime, count: int) -> list[datetime]:
    return list(islice(iter_fires(schedule, after), count))


# --- next fire for common expressions ---------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "after", "expected"),
    [
        # Monday 2024-01-01 10:07
        ("*/15 * * * *", utc(2024, 1, 1, 10, 7), [utc(2024, 1, 1, 10, 15), utc(2024, 1, 1, 10, 30)]),
        ("5 * * * *", utc(2024, 1, 1, 10, 7), [utc(2024, 1, 1, 11, 5), utc(2024, 1, 1, 12, 5)]),
        ("0 9 * * 1-5", utc(2024, 1, 5, 10, 0), [utc(2024, 1, 8, 9), utc(2024, 1, 9, 9)]),
        ("0 9 * * sat,SUN", utc(2024, 1, 1), [utc(2024, 1, 6, 9), utc(2024, 1, 7, 9)]),
        ("0 0 1,15 * *", utc(2024, 1, 1), [utc(2024, 1, 15), utc(2024, 2, 1)]),
        ("0 0 1 jan-mar/2 *", utc(2024, 1, 1), [utc(2024, 3, 1), utc(2025, 1, 1)]),
        ("@hourly", utc(2024, 1, 1, 10, 7), [utc(2024, 1, 1, 11), utc(2024, 1, 1, 12)]),
        ("@daily", utc(2024, 1, 1, 10, 7), [utc(2024, 1, 2), utc(2024, 1, 3)]),
        ("@midnight", utc(2024, 1, 1, 10, 7), [utc(2024, 1, 2), utc(2024, 1, 3)]),
        ("@weekly", utc(2024, 1, 1, 10, 7), [utc(2024, 1, 7), utc(2024, 1, 14)]),
        ("@monthly", utc(2024, 1, 1, 10, 7), [utc(2024, 2, 1), utc(2024, 3, 1)]),
        ("@yearly", utc(2024, 1, 1, 10, 7), [utc(2025, 1, 1), utc(2026, 1, 1)]),
        ("@ANNUALLY", utc(2024, 1, 1, 10, 7), [utc(2025, 1, 1), utc(2026, 1, 1)]),
        # last day of the month, across a leap February
        ("0 0 L * *", utc(2024, 1, 1), [utc(2024, 1, 31), utc(2024, 2, 29), utc(2024, 3, 31)]),
        # last weekday (Mon-Fri) of the month: 2024-03-31 is a Sunday
        ("0 0 LW * *", utc(2024, 3, 1), [utc(2024, 3, 29), utc(2024, 4, 30)]),
        # first Monday, last Friday
        ("0 0 * * MON#1", utc(2024, 1, 1, 1), [utc(2024, 2, 5), utc(2024, 3, 4)]),
        ("0 0 * * 5L", utc(2024, 1, 1), [utc(2024, 1, 26), utc(2024, 2, 23)]),
        # Debian cron: day-of-month OR day-of-week (the 13th, or any Friday) ...
        ("0 0 13 * 5", utc(2024, 1, 1), [utc(2024, 1, 5), utc(2024, 1, 12), utc(2024, 1, 13)]),
        # ... but AND when either starts with "*" (the 1st, 14th or 27th, if it is a Friday)
        (
            "0 0 */13 * 5",
            utc(2024, 1, 1),
            [utc(2024, 3, 1), utc(2024, 6, 14), utc(2024, 9, 27), utc(2024, 11, 1)],
        ),
    ],
)
def test_next_fires_of_common_expressions(cron: str, after: datetime, expected: list[datetime]) -> None:
    schedule = CronSchedule(cron=cron)
    assert fires(schedule, after, len(expected)) == expected
    assert next_fire(schedule, after) == expected[0]


def test_next_fire_is_strictly_after_and_ignores_microseconds() -> None:
    schedule = CronSchedule(cron="*/5 * * * *")
    assert next_fire(schedule, utc(2024, 1, 1, 10, 0)) == utc(2024, 1, 1, 10, 5)
    assert next_fire(schedule, utc(2024, 1, 1, 9, 59, 59, 999999)) == utc(2024, 1, 1, 10, 0)
    assert next_fire(schedule, utc(2024, 1, 1, 10, 0, 0, 1)) == utc(2024, 1, 1, 10, 5)


def test_next_fire_reads_the_expression_in_the_time_zone_and_answers_in_utc() -> None:
    tokyo = CronSchedule(cron="0 9 * * *", timezone="Asia/Tokyo")  # UTC+9, no DST
    fire = next_fire(tokyo, utc(2024, 6, 1, 12))
    assert fire == utc(2024, 6, 2, 0)
    assert fire is not None and fire.tzinfo is UTC
    # `after` may be in any zone: 2024-06-02 08:59 JST is 2024-06-01 23:59 UTC
    assert next_fire(tokyo, datetime(2024, 6, 2, 8, 59, tzinfo=ZoneInfo("Asia/Tokyo"))) == utc(2024, 6, 2, 0)
    kolkata = CronSchedule(cron="0 9 * * *", timezone="Asia/Kolkata")  # UTC+5:30
    assert next_fire(kolkata, utc(2024, 6, 1, 12)) == utc(2024, 6, 2, 3, 30)


def test_naive_datetimes_are_refused() -> None:
    schedule = CronSchedule(cron="@hourly")
    with pytest.raises(ValueError, match="after must be a timezone-aware datetime"):
        next_fire(schedule, datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="now must be a timezone-aware datetime"):
        due_fires(schedule, utc(2024, 1, 1), datetime(2024, 1, 2))
    with pytest.raises(ValueError, match="last_fire must be a timezone-aware datetime"):
        due_fires(schedule, datetime(2024, 1, 1), utc(2024, 1, 2))


def test_expand_cron_normalises_aliases_and_whitespace() -> None:
    assert expand_cron("@Daily") == "0 0 * * *"
    assert expand_cron("@hourly") == "0 * * * *"
    assert expand_cron("  0   9 * *\t1-5 ") == "0 9 * * 1-5"
    assert CronSchedule(cron="@weekly").expression == "0 0 * * 0"


# --- daylight saving time -----------------------------------------------------------------
# America/New_York: 2024-03-10 02:00 EST -> 03:00 EDT (07:00 UTC);
#                   2024-11-03 02:00 EDT -> 01:00 EST (06:00 UTC), 01:00-01:59 happens twice.
# Europe/Berlin:    2024-03-31 02:00 CET -> 03:00 CEST (01:00 UTC);
#                   2024-10-27 03:00 CEST -> 02:00 CET (01:00 UTC), 02:00-02:59 happens twice.

DST_CASES = [
    # daily, spring forward: 02:30 does not exist and fires once at the end of the gap
    (
        "30 2 * * *",
        "America/New_York",
        utc(2024, 3, 9, 12),
        [utc(2024, 3, 10, 7, 0), utc(2024, 3, 11, 6, 30), utc(2024, 3, 12, 6, 30)],
    ),
    (
        "30 2 * * *",
        "Europe/Berlin",
        utc(2024, 3, 30, 12),
        [utc(2024, 3, 31, 1, 0), utc(2024, 4, 1, 0, 30), utc(2024, 4, 2, 0, 30)],
    ),
    # two wall-clock times in the gap collapse into one fire
    (
        "0,30 2 * * *",
        "Europe/Berlin",
        utc(2024, 3, 30, 12),
        [utc(2024, 3, 31, 1, 0), utc(2024, 4, 1, 0, 0), utc(2024, 4, 1, 0, 30)],
    ),
    # daily, fall back: the repeated local time fires once, at its first (summer time) occurrence
    (
        "30 1 * * *",
        "America/New_York",
        utc(2024, 11, 2, 12),
        [utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6, 30), utc(2024, 11, 5, 6, 30)],
    ),
    (
        "30 2 * * *",
        "Europe/Berlin",
        utc(2024, 10, 26, 12),
        [utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30), utc(2024, 10, 29, 1, 30)],
    ),
    # 02:30 is not ambiguous in New York on its fall-back day: the offset simply changes
    (
        "30 2 * * *",
        "America/New_York",
        utc(2024, 11, 2, 12),
        [utc(2024, 11, 3, 7, 30), utc(2024, 11, 4, 7, 30)],
    ),
    # midnight does not exist in Havana on 2024-03-10 (00:00 CST -> 01:00 CDT)
    ("@daily", "America/Havana", utc(2024, 3, 9, 12), [utc(2024, 3, 10, 5), utc(2024, 3, 11, 4)]),
    # hourly, spring forward: every real hour, the missing local hour simply has no fire
    (
        "0 * * * *",
        "America/New_York",
        utc(2024, 3, 10, 5, 30),
        [utc(2024, 3, 10, 6), utc(2024, 3, 10, 7), utc(2024, 3, 10, 8)],
    ),
    (
        "0 * * * *",
        "Europe/Berlin",
        utc(2024, 3, 30, 23, 30),
        [utc(2024, 3, 31, 0), utc(2024, 3, 31, 1), utc(2024, 3, 31, 2)],
    ),
    # hourly, fall back: every real hour, so the repeated local hour fires twice
    (
        "0 * * * *",
        "America/New_York",
        utc(2024, 11, 3, 4, 30),
        [utc(2024, 11, 3, 5), utc(2024, 11, 3, 6), utc(2024, 11, 3, 7), utc(2024, 11, 3, 8)],
    ),
    (
        "0 * * * *",
        "Europe/Berlin",
        utc(2024, 10, 26, 23, 30),
        [utc(2024, 10, 27, 0), utc(2024, 10, 27, 1), utc(2024, 10, 27, 2), utc(2024, 10, 27, 3)],
    ),
    # an interval job inside the repeated hour follows real time: four fires, not two
    (
        "*/30 2 * * *",
        "Europe/Berlin",
        utc(2024, 10, 26, 23),
        [
            utc(2024, 10, 27, 0, 0),
            utc(2024, 10, 27, 0, 30),
            utc(2024, 10, 27, 1, 0),
            utc(2024, 10, 27, 1, 30),
            utc(2024, 10, 28, 1, 0),
        ],
    ),
    # an interval job whose time falls in the gap is skipped (no 02:00 run that day)
    (
        "0 */2 * * *",
        "America/New_York",
        utc(2024, 3, 10, 4),
        [utc(2024, 3, 10, 5), utc(2024, 3, 10, 8), utc(2024, 3, 10, 10)],
    ),
]


@pytest.mark.parametrize(("cron", "zone", "after", "expected"), DST_CASES)
def test_daylight_saving_transitions(cron: str, zone: str, after: datetime, expected: list[datetime]) -> None:
    schedule = CronSchedule(cron=cron, timezone=zone)
    assert fires(schedule, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("cron", "after", "expected"),
    [
        # 2024-10-06 02:00 LHST (+10:30) -> 02:30 LHDT (+11) at 2024-10-05 15:30 UTC:
        # 02:15 does not exist and fires at the end of the gap
        ("15 2 * * *", utc(2024, 10, 5, 12), [utc(2024, 10, 5, 15, 30), utc(2024, 10, 6, 15, 15)]),
        # 2024-04-07 02:00 LHDT -> 01:30 LHST at 2024-04-06 15:00 UTC: 01:45 happens twice, fires once
        ("45 1 * * *", utc(2024, 4, 6, 12), [utc(2024, 4, 6, 14, 45), utc(2024, 4, 7, 15, 15)]),
    ],
)
def test_half_hour_daylight_saving_in_lord_howe(cron: str, after: datetime, expected: list[datetime]) -> None:
    schedule = CronSchedule(cron=cron, timezone="Australia/Lord_Howe")
    assert fires(schedule, after, len(expected)) == expected


@pytest.mark.xfail(strict=True, reason="cronsim 2.8 misses the first whole hour after a gap not on the hour")
@pytest.mark.parametrize(
    ("cron", "zone", "after", "expected"),
    [
        # 02:00 LHST -> 02:30 LHDT: the 03:00 LHDT run (16:00 UTC) is missed
        ("0 */3 * * *", "Australia/Lord_Howe", utc(2024, 10, 5, 15), utc(2024, 10, 5, 16)),
        # 02:45 CHAST -> 03:45 CHADT: asked at 03:50, the 04:00 CHADT run (14:15 UTC) is missed
        ("0 */2 * * *", "Pacific/Chatham", utc(2024, 9, 28, 14, 5), utc(2024, 9, 28, 14, 15)),
    ],
)
def test_known_cronsim_gap_bug_for_stepped_hours_in_odd_zones(
    cron: str, zone: str, after: datetime, expected: datetime
) -> None:
    assert next_fire(CronSchedule(cron=cron, timezone=zone), after) == expected


def test_a_daily_job_is_not_repeated_when_asked_from_inside_the_repeated_hour() -> None:
    schedule = CronSchedule(cron="30 1 * * *", timezone="America/New_York")
    # 06:00 UTC is 01:00 EST, the second 01:00; 01:30 already fired at 05:30 UTC.
    assert next_fire(schedule, utc(2024, 11, 3, 6, 0)) == utc(2024, 11, 4, 6, 30)
    assert next_fire(schedule, utc(2024, 11, 3, 5, 29)) == utc(2024, 11, 3, 5, 30)
    # and a catch-up over the whole night starts it once
    assert due_fires(
        schedule.model_copy(update={"catch_up": "all"}), utc(2024, 11, 3, 4), utc(2024, 11, 3, 8)
    ) == [utc(2024, 11, 3, 5, 30)]


def test_a_daily_job_runs_once_per_day_through_a_whole_year_of_transitions() -> None:
    for zone in ("America/New_York", "Europe/Berlin"):
        schedule = CronSchedule(cron="30 2 * * *", timezone=zone)
        year = [f for f in fires(schedule, utc(2023, 12, 31, 12), 400) if f.year == 2024]
        local_days = [f.astimezone(ZoneInfo(zone)).date() for f in year]
        assert len(year) == 366
        assert len(set(local_days)) == 366


# --- catch-up ---------------------------------------------------------------------------

HOURLY = CronSchedule(cron="0 * * * *")
LAST = utc(2024, 1, 1, 0)  # the engine last fired at midnight, then went down
BACK = utc(2024, 1, 3, 12, 0, 30)  # and came back 60.5 hours later
MISSED = [LAST + timedelta(hours=h) for h in range(1, 61)]  # 01:00 on Jan 1 .. 12:00 on Jan 3


def test_the_outage_fixture_is_what_the_catch_up_tests_assume() -> None:
    assert len(MISSED) == 60
    assert MISSED[-1] == utc(2024, 1, 3, 12)
    assert fires(HOURLY, LAST, 61) == [*MISSED, utc(2024, 1, 3, 13)]


def test_skip_starts_only_an_on_time_fire() -> None:
    plan = plan_catch_up(HOURLY, LAST, BACK)
    assert plan.fires == (utc(2024, 1, 3, 12),)  # 30 s late: within the grace
    assert (plan.due, plan.dropped, plan.counted_all) == (60, 59, True)
    assert plan.cursor == utc(2024, 1, 3, 12)
    late = plan_catch_up(HOURLY, LAST, utc(2024, 1, 3, 12, 5))
    assert late.fires == ()
    assert (late.due, late.dropped) == (60, 60)
    assert late.cursor == utc(2024, 1, 3, 12)  # the dropped fires are still consumed


def test_skip_grace_boundary() -> None:
    last, fire = utc(2024, 1, 1, 9), utc(2024, 1, 1, 10)
    assert due_fires(HOURLY, last, fire) == [fire]
    assert due_fires(HOURLY, last, fire + timedelta(seconds=60)) == [fire]
    assert due_fires(HOURLY, last, fire + timedelta(seconds=61)) == []
    assert due_fires(HOURLY, last, fire + timedelta(seconds=61), grace=timedelta(minutes=5)) == [fire]


def test_once_starts_one_run_for_all_missed_fires() -> None:
    schedule = HOURLY.model_copy(update={"catch_up": "once"})
    plan = plan_catch_up(schedule, LAST, BACK + timedelta(minutes=50))
    assert plan.fires == (utc(2024, 1, 3, 12),)
    assert (plan.due, plan.dropped, plan.cursor) == (60, 59, utc(2024, 1, 3, 12))


def test_all_starts_every_missed_fire_in_order() -> None:
    schedule = HOURLY.model_copy(update={"catch_up": "all"})
    plan = plan_catch_up(schedule, LAST, BACK)
    assert list(plan.fires) == MISSED
    assert (plan.due, plan.dropped, plan.cursor) == (60, 0, MISSED[-1])


def test_all_is_capped_at_max_catch_up_keeping_the_latest() -> None:
    schedule = CronSchedule(cron="0 * * * *", catch_up="all", max_catch_up=10)
    plan = plan_catch_up(schedule, LAST, BACK)
    assert list(plan.fires) == MISSED[-10:]
    assert (plan.due, plan.dropped, plan.counted_all) == (60, 50, True)
    assert plan.cursor == MISSED[-1]
    assert due_fires(schedule, LAST, BACK) == MISSED[-10:]


def test_nothing_due_between_fires() -> None:
    for policy in ("skip", "once", "all"):
        schedule = HOURLY.model_copy(update={"catch_up": policy})
        plan = plan_catch_up(schedule, utc(2024, 1, 1, 10), utc(2024, 1, 1, 10, 59, 59))
        assert plan.fires == ()
        assert (plan.due, plan.dropped, plan.cursor) == (0, 0, utc(2024, 1, 1, 10))


def test_a_new_schedule_has_nothing_due_and_starts_its_cursor_now() -> None:
    for policy in ("skip", "once", "all"):
        schedule = HOURLY.model_copy(update={"catch_up": policy})
        plan = plan_catch_up(schedule, None, BACK)
        assert plan.fires == ()
        assert plan.cursor == BACK
        assert due_fires(schedule, None, utc(2024, 1, 1, 10)) == []  # even exactly on a fire time
        # the first fire is the next one after creation, found from the cursor
        assert due_fires(schedule, plan.cursor, utc(2024, 1, 3, 13)) == [utc(2024, 1, 3, 13)]


def test_a_clock_behind_the_cursor_starts_nothing() -> None:
    plan = plan_catch_up(HOURLY.model_copy(update={"catch_up": "all"}), utc(2024, 1, 2), utc(2024, 1, 1))
    assert plan.fires == ()
    assert plan.cursor == utc(2024, 1, 2)


def test_catch_up_answers_in_utc_whatever_zone_it_is_asked_in() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    schedule = CronSchedule(cron="0 * * * *", catch_up="all")
    got = due_fires(schedule, datetime(2024, 1, 1, 1, tzinfo=berlin), datetime(2024, 1, 1, 3, tzinfo=berlin))
    assert got == [utc(2024, 1, 1, 1), utc(2024, 1, 1, 2)]
    assert all(f.tzinfo is UTC for f in got)


def test_a_very_long_outage_counts_up_to_the_limit_and_still_finds_the_latest() -> None:
    minutely = CronSchedule(cron="* * * * *", catch_up="all", max_catch_up=3)
    last, now = utc(2024, 1, 1), utc(2024, 1, 31, 0, 0, 10)  # 43,200 missed fires
    plan = plan_catch_up(minutely, last, now)
    assert plan.fires == (utc(2024, 1, 30, 23, 58), utc(2024, 1, 30, 23, 59), utc(2024, 1, 31))
    assert plan.counted_all is False
    assert plan.due == DUE_COUNT_LIMIT + 3  # a lower bound
    assert plan.dropped == DUE_COUNT_LIMIT
    assert plan.cursor == utc(2024, 1, 31)
    once = plan_catch_up(minutely.model_copy(update={"catch_up": "once"}), last, now)
    assert once.fires == (utc(2024, 1, 31),)


def test_the_count_limit_with_sparse_fires_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedules, "DUE_COUNT_LIMIT", 5)
    schedule = CronSchedule(cron="0 * * * *", catch_up="all", max_catch_up=4)
    plan = plan_catch_up(schedule, LAST, BACK)
    assert list(plan.fires) == MISSED[-4:]
    assert plan.counted_all is False
    assert plan.cursor == MISSED[-1]
    skip = plan_catch_up(HOURLY, LAST, BACK)  # under the patched limit too
    assert skip.fires == (MISSED[-1],)
    assert skip.counted_all is False


# --- start and end bounds -----------------------------------------------------------------


def test_start_and_end_bounds_are_inclusive() -> None:
    schedule = CronSchedule(cron="0 * * * *", start_at=utc(2024, 1, 1, 10), end_at=utc(2024, 1, 1, 12))
    assert next_fire(schedule, utc(2023, 6, 1)) == utc(2024, 1, 1, 10)
    assert fires(schedule, utc(2023, 6, 1), 10) == [
        utc(2024, 1, 1, 10),
        utc(2024, 1, 1, 11),
        utc(2024, 1, 1, 12),
    ]
    assert next_fire(schedule, utc(2024, 1, 1, 11, 30)) == utc(2024, 1, 1, 12)
    assert next_fire(schedule, utc(2024, 1, 1, 12)) is None
    assert next_fire(schedule, utc(2025, 1, 1)) is None


def test_a_start_between_fires_waits_for_the_next_fire() -> None:
    schedule = CronSchedule(cron="0 * * * *", start_at=utc(2024, 1, 1, 10, 0, 0, 1))
    assert next_fire(schedule, utc(2024, 1, 1)) == utc(2024, 1, 1, 11)


def test_catch_up_respects_the_bounds() -> None:
    schedule = CronSchedule(
        cron="0 * * * *", catch_up="all", start_at=utc(2024, 1, 2, 22), end_at=utc(2024, 1, 3, 2)
    )
    assert due_fires(schedule, LAST, BACK) == [utc(2024, 1, 2, 22 + h) for h in range(2)] + [
        utc(2024, 1, 3, h) for h in range(3)
    ]
    plan = plan_catch_up(schedule.model_copy(update={"catch_up": "once"}), LAST, BACK)
    assert plan.fires == (utc(2024, 1, 3, 2),)
    assert plan.due == 5


def test_bounds_are_stored_in_utc() -> None:
    schedule = CronSchedule.model_validate({"cron": "@daily", "start_at": "2024-01-01T09:00:00+01:00"})
    assert schedule.start_at == utc(2024, 1, 1, 8)
    assert schedule.start_at is not None and schedule.start_at.tzinfo is UTC


# --- validation -----------------------------------------------------------------------------


def _error(**fields: object) -> tuple[tuple[str | int, ...], str]:
    with pytest.raises(ValidationError) as info:
        CronSchedule.model_validate(fields)
    errors = info.value.errors(include_url=False)
    assert len(errors) == 1
    return errors[0]["loc"], errors[0]["msg"]


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("61 * * * *", "invalid cron expression '61 * * * *': bad minute"),
        ("* 24 * * *", "invalid cron expression '* 24 * * *': bad hour"),
        ("0 0 32 * *", "bad day-of-month"),
        ("0 0 * 13 *", "bad month"),
        ("0 0 * * 8", "bad day-of-week"),
        ("0 0 30 2 *", "bad day-of-month"),
        ("*/0 * * * *", "bad minute"),
        ("banana * * * *", "bad minute"),
        ("* * * *", "a cron expression has 5 fields (minute hour day-of-month month day-of-week), got 4"),
        ("0 * * * * *", "got 6"),
        ("   ", "got 0"),
        ("@reboot", "'@reboot' is not a schedule"),
        ("@fortnightly", "unknown cron alias '@fortnightly'; known: @yearly"),
        ("* * */20 * 1L", "never fires"),
    ],
)
def test_invalid_cron_expressions_are_refused_with_clear_messages(cron: str, message: str) -> None:
    loc, msg = _error(cron=cron)
    assert loc == ("cron",)
    assert message in msg


def test_an_empty_cron_expression_is_refused() -> None:
    loc, msg = _error(cron="")
    assert loc == ("cron",)
    assert "at least 1 character" in msg


@pytest.mark.parametrize(
    ("zone", "message"),
    [
        ("Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'; use an IANA time zone name"),
        ("utc", "unknown time zone 'utc'"),
        ("America", "unknown time zone 'America'"),
        ("../etc/passwd", "unknown time zone '../etc/passwd'"),
        ("/etc/localtime", "unknown time zone '/etc/localtime'"),
        ("localtime", "time zone 'localtime' depends on the host"),
    ],
)
def test_invalid_time_zones_are_refused_with_clear_messages(zone: str, message: str) -> None:
    loc, msg = _error(cron="@daily", timezone=zone)
    assert loc == ("timezone",)
    assert message in msg


def test_other_fields_are_validated() -> None:
    assert _error(cron="@daily", catch_up="sometimes")[0] == ("catch_up",)
    assert _error(cron="@daily", max_catch_up=0)[0] == ("max_catch_up",)
    assert _error(cron="@daily", start_at="2024-01-01T00:00:00")[0] == ("start_at",)  # naive
    assert _error(cron="@daily", retries=3)[0] == ("retries",)
    _, msg = _error(cron="@daily", start_at=utc(2024, 1, 2), end_at=utc(2024, 1, 1))
    assert "end_at must be after start_at" in msg


def test_defaults_and_immutability() -> None:
    schedule = CronSchedule(cron="@daily")
    assert (schedule.timezone, schedule.catch_up, schedule.max_catch_up) == ("UTC", "skip", 100)
    assert (schedule.start_at, schedule.end_at) == (None, None)
    with pytest.raises(ValidationError, match="frozen"):
        schedule.cron = "@hourly"  # type: ignore[misc]
    assert CronSchedule.model_validate(schedule.model_dump(mode="json")) == schedule


# --- properties -----------------------------------------------------------------------------

EXPRESSIONS = [
    "* * * * *",
    "*/7 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "30 1 * * *",
    "0,30 2,3 * * *",
    "*/30 2 * * *",
    "0 */2 * * *",
    "15 0 * * *",
    "0 0 L * *",
    "0 12 * * MON#2",
    "45 23 * * 5L",
    "0 9-17 * * 1-5",
    "@weekly",
]
ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "America/Havana",  # DST at midnight
    "America/Santiago",  # southern hemisphere, DST at midnight
    "Asia/Kolkata",
    "Europe/London",
]
# Australia/Lord_Howe and Pacific/Chatham are left out: see the known cronsim gap bug above.

schedules_st = st.builds(
    CronSchedule,
    cron=st.sampled_from(EXPRESSIONS),
    timezone=st.sampled_from(ZONES),
    catch_up=st.sampled_from(["skip", "once", "all"]),
    max_catch_up=st.integers(min_value=1, max_value=50),
)
instants = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None)
@given(schedule=schedules_st, after=instants)
def test_next_fire_is_strictly_increasing_and_never_before_after(
    schedule: CronSchedule, after: datetime
) -> None:
    sequence = fires(schedule, after, 6)
    assert len(sequence) == 6
    assert sequence[0] == next_fire(schedule, after)
    assert sequence[0] > after
    assert all(a < b for a, b in pairwise(sequence))
    assert all(f.tzinfo is UTC for f in sequence)
    # each is also what next_fire answers from the one before
    assert all(next_fire(schedule, a) == b for a, b in pairwise(sequence))


@settings(max_examples=300, deadline=None)
@given(schedule=schedules_st, after=instants, fraction=st.floats(min_value=0, max_value=1))
def test_no_fire_is_hidden_between_after_and_next_fire(
    schedule: CronSchedule, after: datetime, fraction: float
) -> None:
    fire = next_fire(schedule, after)
    assert fire is not None
    gap = (fire - after) // timedelta(microseconds=1)
    middle = after + timedelta(microseconds=int((gap - 1) * fraction))
    assert after <= middle < fire
    assert next_fire(schedule, middle) == fire


@settings(max_examples=300, deadline=None)
@given(
    schedule=schedules_st,
    last_fire=instants,
    outage=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
)
def test_due_fires_lie_within_last_fire_and_now(
    schedule: CronSchedule, last_fire: datetime, outage: timedelta
) -> None:
    now = last_fire + outage
    plan = plan_catch_up(schedule, last_fire, now)
    got = due_fires(schedule, last_fire, now)
    assert got == list(plan.fires)
    assert all(last_fire < f <= now for f in got)
    assert all(a < b for a, b in pairwise(got))
    expected_due = list(takewhile(lambda f: f <= now, iter_fires(schedule, last_fire)))
    assert plan.due == len(expected_due)
    assert plan.dropped == plan.due - len(got)
    assert plan.cursor == (expected_due[-1] if expected_due else last_fire)
    if schedule.catch_up == "all":
        assert got == expected_due[-schedule.max_catch_up :]
    elif schedule.catch_up == "once":
        assert got == expected_due[-1:]
    else:
        assert got == [f for f in expected_due[-1:] if now - f <= schedules.SKIP_GRACE]
