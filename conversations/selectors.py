"""Reads on runs: the timeline that the admin, the API and the pages all show."""

from conversations.models import LLMCall, Run, ToolInvocation


def run_timeline(*, run: Run) -> list[dict]:
    """Every model call attempt and tool invocation of the run, in the order they happened.

    Tool invocations follow the model call that asked for them; ordering by (iteration,
    attempt) then position keeps the steps as the loop took them.
    """
    steps = []
    calls = LLMCall.objects.filter(run=run).order_by("purpose", "iteration", "attempt")
    invocations = (ToolInvocation.objects.filter(run=run).select_related("approval__decided_by")
                   .order_by("llm_call_id", "position"))
    by_call: dict[int, list[ToolInvocation]] = {}
    for invocation in invocations:
        by_call.setdefault(invocation.llm_call_id, []).append(invocation)
    for call in sorted(calls, key=lambda c: (c.started_at, c.pk)):
        steps.append({"kind": "llm_call", "obj": call})
        for invocation in by_call.get(call.pk, []):
            steps.append({"kind": "tool_invocation", "obj": invocation})
    return steps
