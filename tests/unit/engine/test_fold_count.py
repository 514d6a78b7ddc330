"""engine.context.fold_count sizes turns from the newest back and stops once the answer is
known; these hold it to the rule as a forward walk over every turn's size states it."""

import random

import pytest

from agents.providers.base import MESSAGE_OVERHEAD
from engine.context import fold_count


def turn(*tokens: int) -> list[dict]:
    # A CJK character is one token: a message of k characters is k tokens and its framing.
    return [{"role": "user", "content": "问" * k} for k in tokens]


def by_the_rule(sizes: list[int], *, fixed: int, budget: int | None, shrink: bool) -> int:
    """Fold the oldest turns until what is left fits half the budget (or half the total when
    shrinking), keeping the newest; nothing while it all fits and the server did not refuse."""
    total = fixed + sum(sizes)
    if not shrink and total <= budget:
        return 0
    target = budget // 2 if budget else total // 2
    if shrink:
        target = min(target, total // 2)
    fold = 0
    while fold < len(sizes) - 1 and total > target:
        total -= sizes[fold]
        fold += 1
    return fold


def test_a_history_that_fits_is_not_folded():
    assert fold_count([turn(100), turn(100)], fixed=50, budget=1000, shrink=False) == 0


def test_over_budget_folds_down_to_half_of_it():
    turns = [turn(300), turn(300), turn(300), turn(100)]
    # 50 + 4 × (size + framing) = 1066 > 1000; keeping the newest two (408) fits 500, three do not.
    assert fold_count(turns, fixed=50, budget=1000, shrink=False) == 2


def test_the_newest_turn_is_kept_even_when_it_alone_is_too_big():
    assert fold_count([turn(10), turn(5000)], fixed=50, budget=1000, shrink=False) == 1


def test_the_oldest_turns_of_a_long_history_are_not_sized(monkeypatch):
    sized = []
    monkeypatch.setattr("engine.context.wire_tokens", lambda wire, provider=None: sized.append(wire) or 100)
    turns = [turn(1) for _ in range(200)]
    assert fold_count(turns, fixed=0, budget=1000, shrink=False) == 195
    assert len(sized) == 11  # the newest turns until the budget is passed, not all 200


@pytest.mark.parametrize("shrink", [False, True])
def test_random_histories_fold_as_the_rule_says(shrink):
    chosen = random.Random(43 + shrink)
    for _ in range(2000):
        tokens = [[chosen.randint(0, 400) for _ in range(chosen.randint(1, 3))] for _ in range(chosen.randint(2, 30))]
        sizes = [sum(k + MESSAGE_OVERHEAD for k in t) for t in tokens]
        fixed = chosen.randint(0, 600)
        budget = chosen.choice([None, 500, 2000, 8000]) if shrink else chosen.choice([500, 2000, 8000])
        expected = by_the_rule(sizes, fixed=fixed, budget=budget, shrink=shrink)
        assert fold_count([turn(*t) for t in tokens], fixed=fixed, budget=budget, shrink=shrink) == expected
