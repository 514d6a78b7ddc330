"""Figures collected over repetitions, and how they print.

A figure is measured once per repetition; a repetition that raises is recorded as that figure's
failure and the benchmark carries on, so one broken measurement (a baseline client that drops a
connection, a stack that stops answering) is printed as such instead of losing every other figure.
"""

import statistics
from collections import defaultdict


def describe_error(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:200]}" if text else type(error).__name__


class Results:
    def __init__(self):
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, list[str]] = defaultdict(list)
        self.notes: dict[str, list[str]] = defaultdict(list)  # printed beside a figure, e.g. the load average

    def add(self, name: str, value: float) -> None:
        self.samples[name].append(value)

    def fail(self, name: str, error: str) -> None:
        self.errors[name].append(error)

    def attempt(self, names: list[str], measure, *args) -> None:
        """Run one repetition of `measure`, which records some of `names`; each name it did not
        record in this repetition is failed with the error that stopped it."""
        before = {name: len(self.samples[name]) for name in names}
        try:
            measure(self, *args)
        except Exception as error:  # any failure of a measurement is a result to print
            for name in names:
                if len(self.samples[name]) == before[name]:
                    self.fail(name, describe_error(error))

    def median(self, name: str) -> float | None:
        return statistics.median(self.samples[name]) if self.samples[name] else None

    def failed(self) -> list[str]:
        return [name for name, errors in self.errors.items() if errors]


def spread(results: Results, name: str, unit: str = "", scale: float = 1.0, digits: int = 0) -> str:
    """'min 1.2 s, median 1.3 s' over the repetitions that measured `name`, and its failures."""
    values, errors = results.samples[name], results.errors[name]
    if not values:
        return "failed: " + "; ".join(dict.fromkeys(errors)) if errors else "not measured"
    low, mid = min(values) * scale, statistics.median(values) * scale
    text = f"min {low:.{digits}f}{unit}, median {mid:.{digits}f}{unit}"
    if len(values) > 1 or errors:
        text += f" (of {len(values)})"
    if errors:
        text += f"; {len(errors)} repetition(s) failed: " + "; ".join(dict.fromkeys(errors))
    return text


def verdict(value: float | None, target: float, *, at_most: bool) -> str:
    if value is None:
        return "not measured"
    return "met" if (value <= target if at_most else value >= target) else "missed"
