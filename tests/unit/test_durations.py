from datetime import timedelta

import pytest

from agentflow.core.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("1h30m", 5400),
        ("7d", 604800),
        ("500ms", 0.5),
        ("1.5s", 1.5),
        ("2w", 1209600),
        ("PT5M", 300),
        ("P1DT2H", 93600),
        ("pt0.25s", 0.25),
        ("12", 12),
        (3, 3),
        (2.5, 2.5),
        (timedelta(minutes=2), 120),
        (" 1h 2m ", 3720),
    ],
)
def test_parses(text: object, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == pytest.approx(seconds)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad", ["", "soon", "5 parsecs", "-3s", -1, "P", "PT", "1h-2m", "s5", True, float("inf"), "nan"]
)
def test_refuses(bad: object) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_duration(bad)  # type: ignore[arg-type]


def test_formats() -> None:
    assert format_duration(0.12) == "120ms"
    assert format_duration(2.5) == "2.5s"
    assert format_duration(5400) == "1h30m"
    assert format_duration(90061) == "1d1h1m1s"
