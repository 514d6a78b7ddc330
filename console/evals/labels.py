"""Eval metrics in words. The metrics are stored and compared under their identifiers
(evals.metrics, evals.compare); pages name them with these labels, in one place."""

from django.utils.translation import gettext_lazy as _

METRIC_LABELS = {
    "task_completion_rate": _("Task completion rate"),
    "tool_hit_rate": _("Tool hit rate (expected calls made)"),
    "argument_validity_rate": _("Argument parse rate (valid arguments)"),
    "schema_valid_rate": _("Schema valid rate (answers matching the output schema)"),
    "wrong_call_rate": _("Wrong call rate"),
    "pass_at_k": _("Cases passed at least once (pass@k)"),
    "pass_all_k": _("Cases passed every time (pass^k)"),
    "pass_rate_min": _("Worst repetition's pass rate"),
    "pass_rate_max": _("Best repetition's pass rate"),
    "pass_rate_stdev": _("Pass rate spread between repetitions (std. dev.)"),
    "avg_model_turns": _("Model turns per case"),
    "tokens_per_task": _("Tokens per case"),
    "cost_per_task": _("Cost per case"),
    "latency_p50_ms": _("Latency p50 (ms)"),
    "latency_p95_ms": _("Latency p95 (ms)"),
}

# What each scoring check (evals.scoring) verified, for the reasons a failed case lists.
CHECK_LABELS = {
    "finished": _("run finished"),
    "tool_call": _("expected tool call"),
    "forbidden_tool": _("forbidden tool"),
    "no_tool": _("no tool expected"),
    "answer_contains": _("answer contains"),
    "answer_pattern": _("answer pattern"),
    "answer_schema": _("answer schema"),
    "output_schema": _("output schema"),
    "rubric": _("answer rubric (judged)"),
    "max_model_turns": _("most model turns"),
    "max_tokens": _("most tokens"),
}


def metric_label(name: str) -> str:
    return str(METRIC_LABELS.get(name, name))


def check_label(kind: str) -> str:
    return str(CHECK_LABELS.get(kind, kind))
