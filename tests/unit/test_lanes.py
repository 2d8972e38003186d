"""When the whole suite splits into lanes, which lane runs what, and when it stays in one process.

These read this session's real pytest options: a name pytest does not define (``exitfirst``
is ``maxfail``'s flag, not an option) would break every whole-suite run at collection.
"""

from __future__ import annotations

import pytest

from tests import lanes


@pytest.fixture
def whole_suite(pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch) -> pytest.Config:
    """This session's config, made to look like a plain ``pytest`` in lane A."""
    monkeypatch.setattr(pytestconfig, "args_source", pytest.Config.ArgsSource.TESTPATHS)
    monkeypatch.delenv(lanes.CHILD_ENV, raising=False)
    monkeypatch.delenv("AGENTFLOW_TEST_LANES", raising=False)
    monkeypatch.setattr(pytestconfig.option, "collectonly", False)
    for name in lanes.SELECTING_OPTIONS:
        monkeypatch.setattr(pytestconfig.option, name, type(getattr(pytestconfig.option, name))())
    return pytestconfig


def test_a_plain_whole_suite_run_splits(whole_suite: pytest.Config) -> None:
    assert lanes._enabled(whole_suite) is True


@pytest.mark.parametrize(
    ("option", "value"),
    [("keyword", "api"), ("markexpr", "slow"), ("deselect", ["tests/unit"]), ("maxfail", 1)],
)
def test_a_run_that_selects_or_stops_early_stays_in_one_process(
    whole_suite: pytest.Config, monkeypatch: pytest.MonkeyPatch, option: str, value: object
) -> None:
    monkeypatch.setattr(whole_suite.option, option, value)
    assert lanes._enabled(whole_suite) is False


def test_chosen_paths_the_child_lane_and_the_switch_stay_in_one_process(
    whole_suite: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTFLOW_TEST_LANES", "0")
    assert lanes._enabled(whole_suite) is False
    monkeypatch.delenv("AGENTFLOW_TEST_LANES")
    monkeypatch.setenv(lanes.CHILD_ENV, "b")
    assert lanes._enabled(whole_suite) is False
    monkeypatch.delenv(lanes.CHILD_ENV)
    monkeypatch.setattr(whole_suite, "args_source", pytest.Config.ArgsSource.ARGS)
    assert lanes._enabled(whole_suite) is False


def test_lane_c_takes_its_paths_and_every_other_shared_file() -> None:
    files = [
        "tests/integration/test_d.py",
        "tests/integration/test_a.py",
        "tests/integration/test_c.py",
        "tests/integration/test_b.py",
        "tests/integration/test_a.py",  # one per test item: files repeat
        "tests/e2e/test_x.py",  # not shared: stays in lane A
    ]
    assert lanes.lane_c_paths(files) == [
        *lanes.LANE_C,
        "tests/integration/test_b.py",
        "tests/integration/test_d.py",
    ]


def test_no_path_belongs_to_two_lanes() -> None:
    assert not set(lanes.LANE_B) & set(lanes.LANE_C)
    # Fault tests that judge no clock may run in lane C; those that do stay in lane A (last).
    assert all(not path.startswith("tests/fault") for path in lanes.LANE_B)
    assert not set(lanes.LANE_C) & set(lanes.NOT_LAST)
