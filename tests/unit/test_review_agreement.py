"""The agreement of two reviewers' verdicts: share and Cohen's kappa, checked against hand counts."""

import pytest

from reviews.agreement import verdict_agreement


def test_no_pairs_has_no_figures():
    agreement = verdict_agreement([])
    assert (agreement.pairs, agreement.share, agreement.kappa) == (0, None, None)


def test_share_and_kappa_by_hand():
    # 10 runs: both good 4, both bad 3, good/bad 2, bad/good 1.
    pairs = [("good", "good")] * 4 + [("bad", "bad")] * 3 + [("good", "bad")] * 2 + [("bad", "good")]
    agreement = verdict_agreement(pairs)
    # observed 0.7; first says good 6/10, second 5/10: chance 0.6*0.5 + 0.4*0.5 = 0.5.
    assert agreement.pairs == 10 and agreement.agreed == 7
    assert agreement.share == pytest.approx(0.7)
    assert agreement.kappa == pytest.approx((0.7 - 0.5) / (1 - 0.5))


def test_perfect_and_opposite_agreement():
    assert verdict_agreement([("good", "good"), ("bad", "bad")]).kappa == pytest.approx(1.0)
    assert verdict_agreement([("good", "bad"), ("bad", "good")]).kappa == pytest.approx(-1.0)


def test_kappa_is_none_when_chance_explains_everything():
    agreement = verdict_agreement([("good", "good")] * 3)
    assert agreement.share == 1.0 and agreement.kappa is None
