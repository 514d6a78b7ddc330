"""A fork beside its source, step by step from the fork point: what each side's model said and
asked for, what its tools gave back, what the step used, and where the two differ.

A step is a model-call iteration. Its output is the answer of its last attempt (the one the run
went on from); its tokens, cost and latency add up every attempt. Two sides differ in a cell
when the model's text, the tool calls it asked for (names and arguments) or the results those
calls got are not the same; the ids the model gave its calls are not compared. A fixed number
of queries whatever the runs' size.

The totals compare like with like: only the steps both sides made themselves. A step copied on
either side (the fork's step N when its change is an edited tool result of that step; a step a
source that is itself a fork copied) cost nothing there, so it is left out on both sides.
"""

import json
from decimal import Decimal

from django.utils.translation import gettext as _

from console.monitoring.labels import fork_change_text, run_status_text, stop_reason_text, tool_status_text
from conversations.models import LLMCall, Message, Run, ToolInvocation
from conversations.selectors import run_final_answer


def _arguments(raw):
    """A tool call's arguments as the model gave them, parsed when they are JSON (so that key
    order or spacing does not read as a difference)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _pretty(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


def _tool_calls(message: Message | None) -> list[dict]:
    calls = []
    for call in (message.tool_calls or []) if message else []:
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        arguments = _arguments(function.get("arguments"))
        calls.append({"id": call.get("id", ""), "name": function.get("name", ""), "arguments": arguments})
    return calls


def _result(invocation: ToolInvocation) -> dict:
    return {
        "tool": invocation.tool_name,
        "tool_call_id": invocation.tool_call_id,
        "status": invocation.status,
        "status_text": tool_status_text(invocation.status),
        "result": invocation.result,
        "error": invocation.error,
        "simulated": invocation.simulated,
        "copied": invocation.copied,
    }


def _cell(calls: list[LLMCall], answers: dict[int, Message], results: dict[int, list]) -> dict:
    """One side of one step; `calls` are the step's attempts in order (none: the side has no such step)."""
    if not calls:
        return {"present": False, "content": "", "tool_calls": [], "results": [], "tokens": 0, "cost": Decimal(0)}
    last = calls[-1]
    message = answers.get(last.pk)
    tool_calls = _tool_calls(message)
    return {
        "present": True,
        "status": last.status,
        "error": last.error,
        "model": last.model_name,
        "attempts": len(calls),
        "copied": last.copied,
        "content": message.content if message else "",
        "tool_calls": [{**call, "arguments_text": _pretty(call["arguments"])} for call in tool_calls],
        "results": results.get(last.pk, []),
        "tokens": sum(call.total_tokens for call in calls),
        "prompt_tokens": sum(call.prompt_tokens for call in calls),
        "completion_tokens": sum(call.completion_tokens for call in calls),
        "cost": sum((call.cost for call in calls), Decimal(0)),
        "latency_ms": sum(call.latency_ms or 0 for call in calls),
    }


def _compared(cell: dict) -> dict:
    """What is compared of a cell: the text, the calls asked for, the results they got."""
    return {
        "content": cell["content"],
        "tool_calls": [(call["name"], call["arguments"]) for call in cell["tool_calls"]],
        "results": [(r["tool"], r["status"], r["result"], r["error"]) for r in cell["results"]],
    }


def _differs(source: dict, fork: dict) -> dict:
    a, b = _compared(source), _compared(fork)
    differs = {key: a[key] != b[key] or source["present"] != fork["present"] for key in a}
    differs["any"] = any(differs.values())
    return differs


def _made(row: dict) -> bool:
    """Whether the step counts in the compared totals: no side copied it."""
    return not (row["source"].get("copied") or row["fork"].get("copied"))


def _side(run: Run, answer: Message | None, cells: list[dict]) -> dict:
    """A run's ending and its totals: the run's own, and those of the compared steps (`cells`)."""
    return {
        "id": str(run.pk),
        "agent_version": run.agent_version.number,
        "status": run.status,
        "status_text": run_status_text(run.status),
        "stop_reason": run.stop_reason,
        "stop_reason_text": stop_reason_text(run.stop_reason),
        "error": run.error,
        "answer": answer.content if answer is not None else None,
        "iterations": run.iterations,
        "total_tokens": run.total_tokens,
        "cost": run.cost,
        "duration_ms": run.duration_ms,
        "compared": {
            "tokens": sum(cell["tokens"] for cell in cells),
            "cost": sum((cell["cost"] for cell in cells), Decimal(0)),
            "latency_ms": sum(cell.get("latency_ms", 0) for cell in cells),
        },
    }


def _change(described: dict) -> dict:
    """Run.fork_change in words: what changed, its detail, who forked and what writes may do."""
    kind = described.get("kind", "")
    detail = ""
    if "version" in described:
        detail = _("version %(number)s") % {"number": described["version"]}
    elif "model" in described:
        detail = described["model"]
    elif "tool_call_id" in described:
        detail = _("tool call %(id)s returns: %(result)s") % {
            "id": described["tool_call_id"],
            "result": described.get("result", ""),
        }
    elif "message" in described:
        detail = described["message"]
    return {
        "kind": kind,
        "text": fork_change_text(kind),
        "detail": detail,
        "by": described.get("by", ""),
        "real_writes": bool(described.get("real_writes")),
        "write_results": described.get("write_results") or {},
    }


def fork_comparison(fork: Run) -> dict:
    """The fork and its source from the fork step on: a header and one row per step. The source
    must still exist (Run.forked_from set)."""
    source = Run.objects.select_related("agent_version").get(pk=fork.forked_from_id)
    runs = (source.pk, fork.pk)
    calls = list(
        LLMCall.objects.filter(run_id__in=runs, purpose=LLMCall.Purpose.STEP, iteration__gte=fork.fork_step).order_by(
            "iteration", "attempt", "started_at", "pk"
        )
    )
    call_ids = [call.pk for call in calls]
    answers = {
        message.llm_call_id: message
        for message in Message.objects.filter(llm_call_id__in=call_ids, role=Message.Role.ASSISTANT)
    }
    results: dict[int, list] = {}
    for invocation in ToolInvocation.objects.filter(llm_call_id__in=call_ids).order_by("llm_call_id", "position"):
        results.setdefault(invocation.llm_call_id, []).append(_result(invocation))
    attempts: dict[tuple, list[LLMCall]] = {}
    for call in calls:
        attempts.setdefault((call.run_id, call.iteration), []).append(call)
    steps = sorted({call.iteration for call in calls})
    rows = []
    for step in steps:
        left = _cell(attempts.get((source.pk, step), []), answers, results)
        right = _cell(attempts.get((fork.pk, step), []), answers, results)
        rows.append({"step": step, "source": left, "fork": right, "differs": _differs(left, right)})
    counted = [row for row in rows if _made(row)]
    source_side = _side(source, run_final_answer(run=source), [row["source"] for row in counted])
    fork_side = _side(fork, run_final_answer(run=fork), [row["fork"] for row in counted])
    return {
        "step": fork.fork_step,
        # The steps the totals cover, and those left out of them because a side copied them.
        "compared_steps": [row["step"] for row in counted],
        "copied_steps": [row["step"] for row in rows if not _made(row)],
        "change": _change(fork.fork_change or {}),
        "source": source_side,
        "fork": fork_side,
        "answer_differs": source_side["answer"] != fork_side["answer"],
        "differences": sum(row["differs"]["any"] for row in rows),
        "rows": rows,
    }
