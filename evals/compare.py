"""Comparing two eval runs, baseline and candidate: metric by metric and case by case, with
regressions first. Pure over the two runs' metrics and results, so the command and the
console's page say the same thing."""

from dataclasses import dataclass

# Higher is better for these; a drop beyond `max_rate_drop` (absolute) is a regression.
RATES = (
    "task_completion_rate",
    "tool_hit_rate",
    "argument_validity_rate",
    "schema_valid_rate",
    "pass_at_k",
    "pass_all_k",
    "pass_rate_min",
)
# Lower is better: wrong_call_rate by an absolute rise, the costs and latencies by a relative one.
LOWER_RATES = ("wrong_call_rate",)
COSTS = ("avg_model_turns", "tokens_per_task", "cost_per_task")
# Latency is not a cost: two eval runs of one version on a busy machine differ by more than a
# cost threshold would allow, so it has a threshold of its own, generous by default.
LATENCIES = ("latency_p50_ms", "latency_p95_ms")
INFORMATIVE = ("pass_rate_max", "pass_rate_stdev")

DEFAULT_MAX_RATE_DROP = 0.05
DEFAULT_MAX_COST_INCREASE = 0.25
DEFAULT_MAX_LATENCY_INCREASE = 1.0


@dataclass(frozen=True)
class Thresholds:
    max_rate_drop: float = DEFAULT_MAX_RATE_DROP
    max_cost_increase: float = DEFAULT_MAX_COST_INCREASE
    max_latency_increase: float = DEFAULT_MAX_LATENCY_INCREASE


@dataclass(frozen=True)
class Row:
    name: str
    baseline: float | None
    candidate: float | None
    regression: bool

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.candidate is None:
            return None
        return self.candidate - self.baseline


def _metric_regressed(name: str, base, cand, t: Thresholds) -> bool:
    if base is None or cand is None:
        return False
    if name in RATES:
        return cand < base - t.max_rate_drop
    if name in LOWER_RATES:
        return cand > base + t.max_rate_drop
    if name in COSTS:
        return cand > base * (1 + t.max_cost_increase) and cand > base
    if name in LATENCIES:
        return cand > base * (1 + t.max_latency_increase) and cand > base
    return False


def metric_rows(baseline: dict, candidate: dict, thresholds: Thresholds) -> list[Row]:
    names = RATES + LOWER_RATES + COSTS + LATENCIES + INFORMATIVE
    rows = [
        Row(
            name,
            baseline.get(name),
            candidate.get(name),
            _metric_regressed(name, baseline.get(name), candidate.get(name), thresholds),
        )
        for name in names
    ]
    return sorted(rows, key=lambda row: not row.regression)


def _case_pass_rates(results: list[dict]) -> dict[str, float]:
    passes: dict[str, list[bool]] = {}
    for result in results:
        passes.setdefault(result["case__name"], []).append(bool(result["passed"]))
    return {name: sum(p) / len(p) for name, p in passes.items()}


def case_rows(baseline: list[dict], candidate: list[dict], thresholds: Thresholds) -> list[Row]:
    """Each case's pass rate over its repetitions in both runs (cases matched by name)."""
    base, cand = _case_pass_rates(baseline), _case_pass_rates(candidate)
    rows = [
        Row(
            name,
            base.get(name),
            cand.get(name),
            _metric_regressed("task_completion_rate", base.get(name), cand.get(name), thresholds),
        )
        for name in sorted(base.keys() | cand.keys())
    ]
    return sorted(rows, key=lambda row: not row.regression)


def has_regression(*row_lists: list[Row]) -> bool:
    return any(row.regression for rows in row_lists for row in rows)
