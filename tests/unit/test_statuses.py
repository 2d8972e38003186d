from agentflow.core.statuses import ALLOWED, TERMINAL, RunStatus, can_transition


def test_terminal_and_active_partition_the_statuses() -> None:
    assert {s for s in RunStatus if s.is_terminal} == {
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELED,
    }
    assert all(s.is_active != s.is_terminal for s in RunStatus)


def test_terminal_runs_only_leave_by_retry_of_a_failure() -> None:
    assert not ALLOWED[RunStatus.COMPLETED]
    assert not ALLOWED[RunStatus.CANCELED]
    assert ALLOWED[RunStatus.FAILED] == {RunStatus.IN_PROGRESS}


def test_every_active_status_can_be_canceled_and_can_fail() -> None:
    for status in RunStatus:
        if status not in TERMINAL:
            assert can_transition(status, RunStatus.CANCELED)
            assert can_transition(status, RunStatus.FAILED)


def test_waiting_never_completes_without_running() -> None:
    assert not can_transition(RunStatus.WAITING, RunStatus.COMPLETED)
    assert not can_transition(RunStatus.CREATED, RunStatus.WAITING)
