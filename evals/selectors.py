"""Reads for evaluations."""

from conversations.models import Message, Run, ToolInvocation
from engine.memory import memories_shown
from evals.models import EvalResult, EvalRun, EvalRunStatus
from evals.scoring import Observation


def run_observation(*, run: Run) -> Observation:
    """What the run did, as scoring reads it: its answer, its tool calls in order, its usage."""
    last = (
        Message.objects.filter(run=run, role=Message.Role.ASSISTANT).order_by("-order").only("content", "tool_calls")
    ).first()
    answer = last.content if last is not None and not last.tool_calls else ""
    calls = [
        {"name": name, "arguments": arguments, "valid": arguments is not None and not errors}
        for name, arguments, errors in ToolInvocation.objects.filter(run=run)
        .order_by("llm_call_id", "position")
        .values_list("tool_name", "arguments", "validation_errors")
    ]
    return Observation(
        stop_reason=run.stop_reason or run.status,
        answer=answer,
        tool_calls=calls,
        model_turns=run.iterations,
        total_tokens=run.total_tokens,
        memories_shown=[memory.statement for memory in memories_shown(run_id=run.pk)],
    )


def eval_results_data(*, eval_run: EvalRun) -> list[dict]:
    """The scored results as the metrics function reads them."""
    return list(
        EvalResult.objects.filter(eval_run=eval_run, scored=True).values(
            "case",
            "case__name",
            "repetition",
            "passed",
            "checks",
            "tool_calls",
            "valid_tool_calls",
            "model_turns",
            "total_tokens",
            "cost",
            "latency_ms",
        )
    )


def eval_run_reusable(*, suite, agent_version, repetitions: int) -> EvalRun | None:
    """The latest finished eval run of this suite, version and repetitions, if there is one."""
    return (
        EvalRun.objects.filter(
            suite=suite, agent_version=agent_version, repetitions=repetitions, status=EvalRunStatus.COMPLETED
        )
        .order_by("-finished_at")
        .first()
    )


def eval_runs_latest(*, version_ids: list[int]) -> dict[int, EvalRun]:
    """Each version's most recently finished eval run (any suite), for the live versions table."""
    latest: dict[int, EvalRun] = {}
    finished = (
        EvalRun.objects.filter(agent_version_id__in=version_ids, status=EvalRunStatus.COMPLETED)
        .select_related("suite")
        .only("agent_version_id", "metrics", "finished_at", "suite__name")
        .order_by("agent_version_id", "-finished_at")
    )
    for eval_run in finished:
        latest.setdefault(eval_run.agent_version_id, eval_run)
    return latest


def run_case_material(*, run: Run) -> dict | None:
    """What an eval case made from a run takes from it: the conversation's text turns up to and
    including the run's user message, the tool calls the run made (name and parsed arguments, in
    order) and what those that succeeded returned, the first result of each tool. None when the
    run has no user message (one queued behind another has not stored it yet)."""
    user_message = Message.objects.filter(run=run, role=Message.Role.USER).order_by("order").only("order").first()
    if user_message is None:
        return None
    turns = [
        {"role": role, "content": content}
        for role, content, tool_calls in Message.objects.filter(
            conversation_id=run.conversation_id,
            order__lte=user_message.order,
            role__in=[Message.Role.USER, Message.Role.ASSISTANT],
        )
        .order_by("order")
        .values_list("role", "content", "tool_calls")
        # An assistant message that called tools is not a text turn (its calls and their results
        # would have to travel with it); an empty one says nothing.
        if content and not tool_calls
    ]
    calls, results = [], {}
    for name, arguments, status, result in (
        ToolInvocation.objects.filter(run=run)
        .order_by("llm_call_id", "position")
        .values_list("tool_name", "arguments", "status", "result")
    ):
        calls.append({"name": name, "arguments": arguments} if isinstance(arguments, dict) else {"name": name})
        if status == ToolInvocation.Status.SUCCEEDED:
            results.setdefault(name, result)
    return {"turns": turns, "expected_tool_calls": calls, "tool_results": results}
