"""Values remembered per object: worked out once for an object, never given to another."""

from __future__ import annotations

from agentflow.core.identity_memo import IdentityMemo


def test_a_value_is_worked_out_once_per_object_and_equal_objects_get_their_own() -> None:
    made: list[list[int]] = []

    def total(numbers: list[int]) -> int:
        made.append(numbers)
        return sum(numbers)

    memo = IdentityMemo(total)
    first, equal = [1, 2], [1, 2]
    assert (memo(first), memo(first), memo(equal)) == (3, 3, 3)
    assert made == [first, equal] and made[1] is equal


def test_a_full_memo_starts_over_and_still_answers_right() -> None:
    memo = IdentityMemo(len, limit=3)
    lists = [[0] * n for n in range(10)]  # kept alive: ids stay their own
    assert [memo(x) for x in lists] == list(range(10))
    assert len(memo._kept) <= 3
    assert [memo(x) for x in lists] == list(range(10))
