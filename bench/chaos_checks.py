"""Invariants the chaos runs must keep, checked from the ledger and the counting service.

Shared by the chaos script (bench/chaos.py) and its small version in the test suite.
"""

from collections import Counter

from django.db.models import Count, Q, Sum

from conversations.models import TERMINAL_STATUSES, Approval, LLMCall, Message, Run, ToolInvocation
from tools.arguments import arguments_hash


def chaos_report(*, run_ids: list, write_tool: str, tally: dict) -> dict:
    runs = Run.objects.filter(pk__in=run_ids)
    statuses = Counter(runs.values_list("status", flat=True))
    stop_reasons = Counter(runs.values_list("stop_reason", flat=True))
    non_terminal = sum(n for s, n in statuses.items() if s not in TERMINAL_STATUSES)

    # No message lost: every run kept its user message, and every completed run answered.
    with_user = set(Message.objects.filter(run__in=runs, role="user").values_list("run_id", flat=True))
    answered = set(Message.objects.filter(run__in=runs, role="assistant", tool_calls__isnull=True)
                   .values_list("run_id", flat=True))
    completed = set(runs.filter(status="completed").values_list("pk", flat=True))
    lost = len(set(run_ids) - with_user) + len(completed - answered)

    # Writes: the tool is not idempotent, so the engine alone must keep it at most once: a call
    # that succeeded wrote exactly once, an interrupted one at most once, an unapproved one never.
    writes = ToolInvocation.objects.filter(run__in=runs, tool_name=write_tool).select_related("approval")
    per_key = tally["per_key"]
    succeeded = [inv for inv in writes if inv.status == "succeeded"]
    approved = {inv.idempotency_key for inv in writes
                if getattr(inv, "approval", None) is not None and inv.approval.status == Approval.Status.APPROVED
                and arguments_hash(inv.approval.arguments) == inv.approval.arguments_hash}
    ours = {inv.idempotency_key for inv in writes}

    # Ledger consistency: every completed model call produced exactly one assistant message,
    # every finished tool call of a completed run has its tool message, totals add up.
    calls = LLMCall.objects.filter(run__in=runs, status="succeeded", purpose="step")
    orphan_calls = calls.exclude(pk__in=Message.objects.filter(run__in=runs).values("llm_call_id")).count()
    tool_messages = set(Message.objects.filter(run__in=runs, role="tool").values_list("run_id", "tool_call_id"))
    orphan_tools = sum(1 for run_id, call_id in ToolInvocation.objects.filter(run__in=completed)
                       .values_list("run_id", "tool_call_id") if (run_id, call_id) not in tool_messages)
    sums = {row["run"]: row for row in LLMCall.objects.filter(run__in=runs).values("run")
            .annotate(tokens=Sum("total_tokens"), succeeded=Count("pk", filter=Q(status="succeeded")))}
    totals_off = sum(1 for run in runs.only("pk", "total_tokens")
                     if run.total_tokens != ((sums.get(run.pk) or {}).get("tokens") or 0))

    return {
        "runs": len(run_ids), "statuses": dict(statuses), "stop_reasons": dict(stop_reasons),
        "non_terminal": non_terminal, "lost": lost,
        "writes_succeeded": len(succeeded),
        "writes_interrupted": sum(1 for inv in writes if inv.error == "interrupted"),
        "writes_recorded": sum(per_key.get(key, 0) for key in ours),
        "duplicated": sum(max(0, per_key.get(key, 0) - 1) for key in ours),
        "missing_writes": sum(1 for inv in succeeded if per_key.get(inv.idempotency_key, 0) == 0),
        "unapproved_writes": sum(1 for key in ours if per_key.get(key, 0) and key not in approved),
        "orphan_llm_calls": orphan_calls, "orphan_tool_calls": orphan_tools, "totals_mismatch": totals_off,
        "retried_model_attempts": LLMCall.objects.filter(run__in=runs, attempt__gt=1).count(),
        "recoveries": runs.aggregate(n=Sum("recoveries"))["n"] or 0,
    }


PROBLEMS = ("non_terminal", "lost", "duplicated", "missing_writes", "unapproved_writes", "orphan_llm_calls",
            "orphan_tool_calls", "totals_mismatch")


def report_ok(report: dict) -> bool:
    return all(report[key] == 0 for key in PROBLEMS)
