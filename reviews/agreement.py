"""How often two reviewers of one run give the same verdict: the share of agreement and Cohen's
kappa (agreement beyond what two reviewers voting at their own rates would reach by chance)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Agreement:
    pairs: int
    agreed: int
    share: float | None
    kappa: float | None


def verdict_agreement(pairs: list[tuple[str, str]], categories=("good", "bad")) -> Agreement:
    """pairs: (first reviewer's verdict, second reviewer's) per run labelled twice. Kappa is None
    when chance alone explains everything (both reviewers always gave one same verdict)."""
    if not pairs:
        return Agreement(pairs=0, agreed=0, share=None, kappa=None)
    total = len(pairs)
    agreed = sum(1 for first, second in pairs if first == second)
    observed = agreed / total
    expected = sum(
        (sum(1 for first, _s in pairs if first == c) / total) * (sum(1 for _f, second in pairs if second == c) / total)
        for c in categories
    )
    kappa = None if expected >= 1 else (observed - expected) / (1 - expected)
    return Agreement(pairs=total, agreed=agreed, share=observed, kappa=kappa)
