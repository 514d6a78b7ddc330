"""A ledger of many finished runs written in bulk (no engine), for export and retention tests.

Each run has a conversation of its own, a request, a user message and an answer, two model calls,
one tool invocation with its approval, and three events: ten rows, as a small real run has.
"""

from datetime import datetime
from decimal import Decimal

from agents.services import agent_version_current
from conversations.models import (
    Approval,
    Conversation,
    LLMCall,
    Message,
    Run,
    RunEvent,
    RunRequest,
    ToolInvocation,
)

# Per run: the run, its request, two messages, two model calls, an invocation, an approval and
# three events (the conversation is not counted).
ROWS_PER_RUN = {"llm_calls": 2, "tool_invocations": 1, "approvals": 1, "events": 3}
# Makes each model call's stored request about a kilobyte, like a short real one.
REQUEST_TEXT = "What is the weather in Hangzhou tomorrow, and should I cycle? " * 16


def ledger_seed(
    agent, count: int, *, owner=None, created_at: datetime | None = None, status: str = "completed"
) -> list[Run]:
    version = agent_version_current(agent=agent)
    model = agent.model_config
    conversations = Conversation.objects.bulk_create(
        [Conversation(agent=agent, owner=owner, message_count=2) for _ in range(count)], batch_size=1000
    )
    runs = Run.objects.bulk_create(
        [
            Run(
                conversation=c,
                agent=agent,
                agent_version=version,
                status=status,
                stop_reason="final_answer" if status == "completed" else "",
                iterations=2,
                prompt_tokens=300,
                completion_tokens=40,
                total_tokens=340,
                cost=Decimal("0.00042"),
                event_seq=3,
            )
            for c in conversations
        ],
        batch_size=1000,
    )
    if created_at is not None:
        Run.objects.filter(pk__in=[r.pk for r in runs]).update(created_at=created_at, finished_at=created_at)
        Conversation.objects.filter(pk__in=[c.pk for c in conversations]).update(created_at=created_at)
    RunRequest.objects.bulk_create(
        [
            RunRequest(run=r, conversation=r.conversation, user=owner, content="Weather?", content_hash="0" * 64)
            for r in runs
        ],
        batch_size=1000,
    )
    calls = LLMCall.objects.bulk_create(
        [
            LLMCall(
                run=r,
                iteration=iteration,
                attempt=1,
                model_config=model,
                provider=model.provider,
                model_name=model.model,
                request={"messages": [{"role": "user", "content": REQUEST_TEXT}]},
                response={"choices": [{"message": {"content": "sunny"}}]},
                status="succeeded",
                prompt_tokens=150,
                completion_tokens=20,
                total_tokens=170,
                cost=Decimal("0.00021"),
                latency_ms=900,
            )
            for r in runs
            for iteration in (1, 2)
        ],
        batch_size=1000,
    )
    invocations = ToolInvocation.objects.bulk_create(
        [
            ToolInvocation(
                run=call.run,
                llm_call=call,
                tool_name="server-weather",
                tool_call_id=f"call-{call.run.pk.hex[:8]}",
                arguments={"city": "Hangzhou"},
                raw_arguments='{"city": "Hangzhou"}',
                status="succeeded",
                result="=SUM(A1:A9) sunny, 24°C",
                idempotency_key=f"{call.run.pk}:call",
            )
            for call in calls[::2]
        ],
        batch_size=1000,
    )
    Approval.objects.bulk_create(
        [
            Approval(
                invocation=invocation,
                run=invocation.run,
                tool_call_id=invocation.tool_call_id,
                status="approved",
                arguments={"city": "Hangzhou"},
                arguments_hash="0" * 64,
                channel="api",
            )
            for invocation in invocations
        ],
        batch_size=1000,
    )
    RunEvent.objects.bulk_create(
        [
            RunEvent(run=r, seq=seq, type=kind, payload={"seq": seq})
            for r in runs
            for seq, kind in ((1, "run.queued"), (2, "run.started"), (3, "run.completed"))
        ],
        batch_size=1000,
    )
    Message.objects.bulk_create(
        [
            message
            for r, call in zip(runs, calls[1::2], strict=True)
            for message in (
                Message(conversation=r.conversation, run=r, order=1, role="user", content="Weather?"),
                Message(conversation=r.conversation, run=r, llm_call=call, order=2, role="assistant", content="Sunny."),
            )
        ],
        batch_size=1000,
    )
    return runs
