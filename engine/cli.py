"""Terminal helpers for the management commands: wait for a run and print its timeline."""

import json
import time
from collections.abc import Callable

from conversations.models import Approval, Run, RunStatus, ToolInvocation
from conversations.selectors import run_final_answer, run_timeline
from tools.arguments import arguments_hash


class RunWaitTimeout(Exception):
    pass


def run_wait(*, run_id, timeout: float = 120, poll: float = 0.2, on_park: Callable[[Run], None] | None = None) -> Run:
    """The run once it has ended, or once it waits for an approval. With `on_park`, a parked run
    is reported to it (once per wait) and waited for until a person decides and it ends."""
    deadline = time.monotonic() + timeout
    reported = set()
    while True:
        run = Run.objects.get(pk=run_id)
        if run.is_terminal or (run.status == RunStatus.AWAITING_APPROVAL and on_park is None):
            return run
        if run.status == RunStatus.AWAITING_APPROVAL:
            pending = set(run.approvals.filter(status=Approval.Status.PENDING).values_list("pk", flat=True))
            if pending - reported:
                on_park(run)
                reported |= pending
        if time.monotonic() > deadline:
            if run.status == RunStatus.AWAITING_APPROVAL:
                raise RunWaitTimeout(f"run {run_id} still waits for an approval after {timeout:.0f} s")
            raise RunWaitTimeout(f"run {run_id} still {run.status} after {timeout:.0f} s; is a worker running?")
        time.sleep(poll)


def pending_approvals(run: Run) -> list[str]:
    """One line per call of the run waiting for a person: what it is and how to decide it."""
    approvals = run.approvals.filter(status=Approval.Status.PENDING).select_related("invocation")
    return [
        f"  waiting for approval {a.pk}: {a.invocation.tool_name} {json.dumps(a.arguments, ensure_ascii=False)} "
        f"(decide at /approvals/ or POST /api/v1/approvals/{a.pk}/decision/)"
        for a in approvals.order_by("pk")
    ]


def _decision(invocation: ToolInvocation) -> str:
    """How a person decided the call, when one did: who, and what the tool ran with if edited."""
    try:
        approval = invocation.approval
    except Approval.DoesNotExist:
        return ""
    who = approval.decided_by.get_username() if approval.decided_by else approval.get_channel_display()
    if approval.status == Approval.Status.PENDING:
        return f" [waiting for approval {approval.pk}]"
    if approval.status == Approval.Status.APPROVED and approval.arguments_hash != arguments_hash(
        invocation.arguments or {}
    ):
        return f" [edited by {who} to {json.dumps(approval.arguments, ensure_ascii=False)}]"
    if approval.status == Approval.Status.REJECTED:
        return f" [rejected by {who}{': ' + approval.reason if approval.reason else ''}]"
    return f" [{approval.status} by {who}]"


def format_run(run: Run) -> str:
    lines = [
        f"run {run.pk}: {run.status} ({run.stop_reason or '-'}), {run.iterations} model steps, "
        f"tokens {run.prompt_tokens} prompt + {run.completion_tokens} completion = {run.total_tokens} "
        f"(cached {run.cached_tokens}, reasoning {run.reasoning_tokens}), cost {run.cost:.8f}, "
        f"{run.duration_ms} ms"
    ]
    for step in run_timeline(run=run):
        o = step["obj"]
        if step["kind"] == "llm_call":
            lines.append(
                f"  LLM call {o.iteration}.{o.attempt} {o.status} {o.finish_reason} "
                f"tokens {o.prompt_tokens}/{o.completion_tokens} {o.latency_ms} ms {o.error}".rstrip()
            )
        else:
            lines.append(
                f"    tool {o.tool_name} {o.status} args {o.raw_arguments}{_decision(o)} → {o.result[:160]}".rstrip()
            )
    answer = run_final_answer(run=run)
    if run.error:
        lines.append(f"  error: {run.error.strip().splitlines()[-1]}")
    if answer is None and run.status == RunStatus.AWAITING_APPROVAL:
        lines.append("  answer: (none yet: the run waits for an approval)")
    else:
        lines.append(f"  answer: {answer.content if answer else '(none)'}")
    return "\n".join(lines)
