"""The metrics of one eval run (seed 001 §5.3), computed by one pure function over its stored
results, so a finished eval run's numbers can always be recomputed and checked by hand.

Each result is a dict with the EvalResult fields: case (id), repetition, passed, checks,
tool_calls, valid_tool_calls, model_turns, total_tokens, cost, latency_ms. The definitions are
in docs/evals.md ("Eval runs and metrics"); a rate with nothing to count is None, not 0.
"""

import math
import statistics
from decimal import Decimal

WRONG_CALL_KINDS = ("no_tool", "forbidden_tool")


def _rate(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def percentile(values: list[float], p: float) -> float | None:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def eval_metrics(results: list[dict], *, repetitions: int) -> dict:
    checks = [check for result in results for check in result["checks"]]
    expected_calls = [check for check in checks if check["kind"] == "tool_call"]
    # Only runs held to an output schema that answered or ended schema_invalid carry this check.
    schema_checks = [check for check in checks if check["kind"] == "output_schema"]
    guarded = [r for r in results if any(c["kind"] in WRONG_CALL_KINDS for c in r["checks"])]
    wrong = [r for r in guarded if any(c["kind"] in WRONG_CALL_KINDS and not c["passed"] for c in r["checks"])]
    by_case: dict = {}
    by_repetition: dict = {}
    for result in results:
        by_case.setdefault(result["case"], []).append(bool(result["passed"]))
        by_repetition.setdefault(result["repetition"], []).append(bool(result["passed"]))
    repetition_rates = [sum(passes) / len(passes) for passes in by_repetition.values()]
    latencies = [r["latency_ms"] for r in results if r["latency_ms"] is not None]
    return {
        "results": len(results),
        "cases": len(by_case),
        "repetitions": repetitions,
        "tool_hit_rate": _rate(sum(c["passed"] for c in expected_calls), len(expected_calls)),
        "argument_validity_rate": _rate(
            sum(r["valid_tool_calls"] for r in results), sum(r["tool_calls"] for r in results)
        ),
        "task_completion_rate": _rate(sum(bool(r["passed"]) for r in results), len(results)),
        "schema_valid_rate": _rate(sum(c["passed"] for c in schema_checks), len(schema_checks)),
        "wrong_call_rate": _rate(len(wrong), len(guarded)),
        "avg_model_turns": _mean(r["model_turns"] for r in results),
        "tokens_per_task": _mean(r["total_tokens"] for r in results),
        "cost_per_task": _mean(float(Decimal(str(r["cost"]))) for r in results),
        "latency_p50_ms": percentile(latencies, 50),
        "latency_p95_ms": percentile(latencies, 95),
        "pass_at_k": _rate(sum(any(passes) for passes in by_case.values()), len(by_case)),
        "pass_all_k": _rate(sum(all(passes) for passes in by_case.values()), len(by_case)),
        "pass_rate_min": min(repetition_rates) if repetition_rates else None,
        "pass_rate_max": max(repetition_rates) if repetition_rates else None,
        "pass_rate_stdev": statistics.pstdev(repetition_rates) if repetition_rates else None,
    }
