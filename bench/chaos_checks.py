"""Invariants the chaos runs must keep, checked from the ledger and the counting service.

Shared by the chaos script (bench/chaos.py) and its small version in the test suite.
"""

from collections import Counter

from django.db.models import Count, Max, Sum

from conversations.models import TERMINAL_STATUSES, Approval, Conversation, LLMCall, Message, Run, ToolInvocation
from tools.arguments import arguments_hash


def _writes(runs, write_tool: str, per_key: dict) -> dict:
    """The tool is not idempotent, so the engine alone must keep it at most once: a call that
    succeeded wrote exactly once, an interrupted one at most once, an unapproved one never."""
    writes = ToolInvocation.objects.filter(run__in=runs, tool_name=write_tool).select_related("approval")
    succeeded = [inv for inv in writes if inv.status == "succeeded"]
    approved = {
        inv.idempotency_key
        for inv in writes
        if getattr(inv, "approval", None) is not None
        and inv.approval.status == Approval.Status.APPROVED
        and arguments_hash(inv.approval.arguments) == inv.approval.arguments_hash
    }
    ours = {inv.idempotency_key for inv in writes}
    return {
        "writes_succeeded": len(succeeded),
        "writes_interrupted": sum(1 for inv in writes if inv.error == "interrupted"),
        "writes_recorded": sum(per_key.get(key, 0) for key in ours),
        "duplicated": sum(max(0, per_key.get(key, 0) - 1) for key in ours),
        "missing_writes": sum(1 for inv in succeeded if per_key.get(inv.idempotency_key, 0) == 0),
        "unapproved_writes": sum(1 for key in ours if per_key.get(key, 0) and key not in approved),
    }


def _steps(runs, answered_runs: set) -> dict:
    """Every completed model call is one step of its run, made once, and every tool invocation
    answers a tool call of such a step in the same run; a run that reached its final answer
    ran and answered every call it was asked for."""
    messages = list(
        Message.objects.filter(run__in=runs).values("run_id", "role", "llm_call_id", "tool_calls", "tool_call_id")
    )
    step_of_call = {}  # llm_call_id -> (run_id, tool call ids of its assistant message)
    repeated_messages = 0
    for m in messages:
        if m["llm_call_id"] is not None:
            repeated_messages += m["llm_call_id"] in step_of_call
            step_of_call[m["llm_call_id"]] = (m["run_id"], {c["id"] for c in m["tool_calls"] or []})
    calls = LLMCall.objects.filter(run__in=runs, status=LLMCall.Status.SUCCEEDED, purpose=LLMCall.Purpose.STEP)
    orphan_calls = sum(
        1 for pk, run_id in calls.values_list("pk", "run_id") if step_of_call.get(pk, (None,))[0] != run_id
    )
    repeated_calls = (
        calls.values("run_id", "iteration").annotate(n=Count("pk")).filter(n__gt=1).count() + repeated_messages
    )
    invocations = list(ToolInvocation.objects.filter(run__in=runs).values_list("run_id", "llm_call_id", "tool_call_id"))
    foreign = sum(
        1
        for run_id, call_id, tool_call_id in invocations
        if step_of_call.get(call_id, (None, set()))[0] != run_id or tool_call_id not in step_of_call[call_id][1]
    )
    invoked = {(run_id, tool_call_id) for run_id, _, tool_call_id in invocations}
    answered = Counter((m["run_id"], m["tool_call_id"]) for m in messages if m["role"] == Message.Role.TOOL)
    asked = [(m["run_id"], c["id"]) for m in messages if m["run_id"] in answered_runs for c in m["tool_calls"] or []]
    unanswered = sum(1 for key in asked if key not in invoked or answered[key] != 1)
    return {
        "orphan_llm_calls": orphan_calls,
        "repeated_llm_calls": repeated_calls,
        "orphan_tool_calls": foreign + unanswered,
    }


def _message_gaps(runs) -> int:
    """Orders are handed out 1, 2, 3… per conversation in the writing transaction: a hole or a
    count that disagrees with the rows means a message was lost after it was numbered."""
    conversations = Conversation.objects.filter(pk__in=runs.values("conversation_id")).annotate(
        rows=Count("messages"), top=Max("messages__order")
    )
    return sum(1 for c in conversations if not c.rows == (c.top or 0) == c.message_count)


def _open_rows(runs) -> int:
    """An ended run has no attempt still shown as under way (a dead worker's included)."""
    ended = runs.filter(status__in=TERMINAL_STATUSES)
    open_tools = [ToolInvocation.Status.PENDING, ToolInvocation.Status.AWAITING_APPROVAL, ToolInvocation.Status.RUNNING]
    return (
        LLMCall.objects.filter(run__in=ended, status=LLMCall.Status.STARTED).count()
        + ToolInvocation.objects.filter(run__in=ended, status__in=open_tools).count()
    )


def extractions_expected(runs):
    """The runs a memory extraction follows: completed, in a conversation with an end user."""
    return runs.filter(status="completed").exclude(conversation__end_user="")


def _extractions(runs) -> dict:
    """No extraction's call stays started: its last call ended (succeeded, failed for a reason,
    or cut off and, after its tries, given up), and none succeeded twice. Missing (no call at
    all) is counted, not a problem: a task a killed worker had taken but not started comes back
    only when the broker hands it out again (at once on RabbitMQ, after the visibility timeout
    on Redis)."""
    completed = extractions_expected(runs)
    calls = LLMCall.objects.filter(run__in=completed, purpose=LLMCall.Purpose.MEMORY)
    last = {}
    for run_id, status in calls.order_by("pk").values_list("run_id", "status"):
        last[run_id] = status
    expected = set(completed.values_list("pk", flat=True))
    twice = calls.filter(status=LLMCall.Status.SUCCEEDED).values("run_id").annotate(n=Count("pk")).filter(n__gt=1)
    return {
        "extractions": len(expected),
        "extractions_interrupted": calls.filter(error__startswith="interrupted").count(),
        "extractions_unfinished": sum(1 for pk in expected if last.get(pk) == LLMCall.Status.STARTED),
        "extractions_missing": len(expected - set(last)),
        "extractions_repeated": twice.count(),
    }


def chaos_report(*, run_ids: list, write_tool: str, tally: dict) -> dict:
    runs = Run.objects.filter(pk__in=run_ids)
    statuses = Counter(runs.values_list("status", flat=True))
    stop_reasons = Counter(runs.values_list("stop_reason", flat=True))
    non_terminal = sum(n for s, n in statuses.items() if s not in TERMINAL_STATUSES)

    # No message lost: every run kept its user message, every completed run answered, and no
    # conversation has a hole in its numbered messages.
    with_user = set(Message.objects.filter(run__in=runs, role="user").values_list("run_id", flat=True))
    answered = set(
        Message.objects.filter(run__in=runs, role="assistant", tool_calls__isnull=True).values_list("run_id", flat=True)
    )
    completed = set(runs.filter(status="completed").values_list("pk", flat=True))
    lost = len(set(run_ids) - with_user) + len(completed - answered)

    tokens = dict(
        LLMCall.objects.filter(run__in=runs).values("run").annotate(n=Sum("total_tokens")).values_list("run", "n")
    )
    totals_off = sum(1 for pk, total in runs.values_list("pk", "total_tokens") if total != (tokens.get(pk) or 0))
    final = set(runs.filter(stop_reason="final_answer").values_list("pk", flat=True))

    return {
        "runs": len(run_ids),
        "statuses": dict(statuses),
        "stop_reasons": dict(stop_reasons),
        "non_terminal": non_terminal,
        "lost": lost,
        "message_gaps": _message_gaps(runs),
        **_writes(runs, write_tool, tally["per_key"]),
        **_steps(runs, final),
        "open_ledger_rows": _open_rows(runs),
        **_extractions(runs),
        "totals_mismatch": totals_off,
        "interrupted_model_attempts": LLMCall.objects.filter(run__in=runs, error__startswith="interrupted").count(),
        "recoveries": runs.aggregate(n=Sum("recoveries"))["n"] or 0,
    }


PROBLEMS = (
    "non_terminal",
    "lost",
    "message_gaps",
    "duplicated",
    "missing_writes",
    "unapproved_writes",
    "orphan_llm_calls",
    "repeated_llm_calls",
    "orphan_tool_calls",
    "open_ledger_rows",
    "totals_mismatch",
    "extractions_unfinished",
    "extractions_repeated",
)


def report_ok(report: dict) -> bool:
    return all(report[key] == 0 for key in PROBLEMS)
