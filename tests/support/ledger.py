"""Ledger rows written directly (no engine), for tests of what the monitoring pages read."""

from datetime import datetime
from decimal import Decimal

from agents.services import agent_version_current
from conversations.models import Conversation, LLMCall, Run


def ledger_run(
    agent,
    *,
    status: str = "completed",
    stop_reason: str = "final_answer",
    error: str = "",
    created_at: datetime | None = None,
    finished_at: datetime | None = None,
    **fields,
) -> Run:
    conversation = Conversation.objects.create(agent=agent)
    run = Run.objects.create(
        conversation=conversation,
        agent=agent,
        agent_version=agent_version_current(agent=agent),
        status=status,
        stop_reason=stop_reason,
        error=error,
        finished_at=finished_at,
        started_at=created_at,
        **fields,
    )
    if created_at:
        Run.objects.filter(pk=run.pk).update(created_at=created_at)
    run.refresh_from_db()
    return run


def ledger_call(
    run: Run,
    *,
    started_at: datetime,
    latency_ms: int | None = 100,
    status: str = "succeeded",
    iteration: int | None = None,
    prompt_tokens: int = 100,
    completion_tokens: int = 20,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    cost: str = "0.001",
    error: str = "",
) -> LLMCall:
    model = run.agent.model_config
    iteration = iteration or LLMCall.objects.filter(run=run).count() + 1
    call = LLMCall.objects.create(
        run=run,
        iteration=iteration,
        attempt=1,
        model_config=model,
        provider=model.provider,
        model_name=model.model,
        request={"messages": []},
        status=status,
        latency_ms=latency_ms,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
        reasoning_tokens=reasoning_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        cost=Decimal(cost),
        error=error,
        finished_at=started_at,
    )
    LLMCall.objects.filter(pk=call.pk).update(started_at=started_at)
    call.refresh_from_db()
    return call
