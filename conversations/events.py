"""The run timeline's vocabulary: every RunEvent type, and one payload builder per type.

A RunEvent's `type` and `payload` are a public contract (the SSE stream, webhooks, the try-it
page and the operator timeline read them), so they are spelled here and nowhere else: writers
pass `EventType` members and the payload a builder made; readers compare with `EventType`.
The stored column stays a plain string (no choices on the model), so adding a type here needs
no migration.
"""

from collections.abc import Callable

from django.db import models

from conversations.models import RunStatus


class EventType(models.TextChoices):
    RUN_QUEUED = "run.queued"
    RUN_RUNNING = "run.running"
    RUN_REQUEUED = "run.requeued"
    RUN_RETRIED = "run.retried"
    RUN_AWAITING_APPROVAL = "run.awaiting_approval"
    RUN_AWAITING_CHILDREN = "run.awaiting_children"
    RUN_CANCEL_REQUESTED = "run.cancel_requested"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    RUN_EXPIRED = "run.expired"
    LLM_CALL_STARTED = "llm_call.started"
    LLM_CALL_COMPLETED = "llm_call.completed"
    LLM_CALL_FAILED = "llm_call.failed"
    MESSAGE_DELTA = "message.delta"
    TOOL_STARTED = "tool.started"
    TOOL_COMPLETED = "tool.completed"
    TOOL_PROGRESS = "tool.progress"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_DECIDED = "approval.decided"
    APPROVAL_EXPIRED = "approval.expired"
    APPROVAL_CANCELLED = "approval.cancelled"
    APPROVAL_ESCALATED = "approval.escalated"
    GUARDRAIL_TRIGGERED = "guardrail.triggered"
    PART_CONVERTED = "part.converted"
    ANSWER_REPAIR = "answer.repair"

    @classmethod
    def run_ended(cls, status: str) -> "EventType":
        """The event that ends a run in terminal status `status` (ValueError for any other)."""
        try:
            return _ENDED[RunStatus(status)]
        except KeyError:
            raise ValueError(f"{status!r} is not a terminal status") from None


_ENDED = {
    RunStatus.COMPLETED: EventType.RUN_COMPLETED,
    RunStatus.FAILED: EventType.RUN_FAILED,
    RunStatus.CANCELLED: EventType.RUN_CANCELLED,
    RunStatus.EXPIRED: EventType.RUN_EXPIRED,
}
# A stream or a waiting request is done once one of these arrives.
TERMINAL_EVENT_TYPES = frozenset(_ENDED.values())
# The events after which a request waiting for the outcome reads the run: it ended, or it waits
# for a person (conversations.wakeups.SETTLED).
SETTLING_EVENT_TYPES = TERMINAL_EVENT_TYPES | {EventType.RUN_AWAITING_APPROVAL}


def _present(**fields) -> dict:
    return {key: value for key, value in fields.items() if value is not None}


# Run lifecycle.


def run_queued(
    *, agent_version: int | None = None, waiting_for: list[str] | None = None, reason: str | None = None
) -> dict:
    """Posted (with the pinned version, and the runs it waits behind) or queued again (reason)."""
    return _present(agent_version=agent_version, waiting_for=waiting_for, reason=reason)


def run_running(*, worker: str) -> dict:
    return {"worker": worker}


def run_requeued(
    *,
    reason: str,
    by: str | None = None,
    by_id: int | None = None,
    previous_status: str | None = None,
    previous_owner: str | None = None,
    lease_expires_at: str | None = None,
) -> dict:
    """Back to the queue: a lapsed lease, a used-up time slice, or an operator (who, and from what)."""
    payload = {"reason": reason}
    if by is not None:
        payload.update(
            by=by,
            by_id=by_id,
            previous_status=previous_status,
            previous_owner=previous_owner,
            lease_expires_at=lease_expires_at,
        )
    return payload


def run_retried(*, by: str, by_id: int, resume_after: dict | None, previous: dict) -> dict:
    return {"by": by, "by_id": by_id, "resume_after": resume_after, "previous": previous}


def run_awaiting_approval() -> dict:
    return {}


def run_awaiting_children(*, children: list[str]) -> dict:
    """Parked until the runs its step delegated to (ids) have ended."""
    return {"children": children}


def run_cancel_requested(*, by: str | None, by_id: int | None = None) -> dict:
    return {"by": by} if by is None else {"by": by, "by_id": by_id}


def run_ended(*, stop_reason: str, error: str = "", instead_of: str | None = None) -> dict:
    """Every terminal event (completed, failed, cancelled, expired); `instead_of` names the
    ending a cancel replaced."""
    return _present(stop_reason=stop_reason, error=error, instead_of=instead_of)


# Model calls.


def llm_call_started(*, llm_call_id: int, purpose: str, iteration: int, attempt: int, model: str) -> dict:
    return {"llm_call_id": llm_call_id, "purpose": purpose, "iteration": iteration, "attempt": attempt, "model": model}


def llm_call_completed(
    *,
    llm_call_id: int,
    purpose: str,
    iteration: int,
    attempt: int,
    finish_reason: str,
    tool_calls: list[str],
    usage: dict,
    cost: str,
    prices: dict,
) -> dict:
    return {
        "llm_call_id": llm_call_id,
        "purpose": purpose,
        "iteration": iteration,
        "attempt": attempt,
        "finish_reason": finish_reason,
        "tool_calls": tool_calls,
        "usage": usage,
        "cost": cost,
        "prices": prices,
    }


def llm_call_failed(
    *,
    llm_call_id: int,
    purpose: str,
    attempt: int,
    error: str,
    http_status: int | None,
    retryable: bool,
    usage: dict | None = None,
) -> dict:
    """A failed attempt; `usage` when an answer came back but could not be used (it still cost)."""
    payload = {
        "llm_call_id": llm_call_id,
        "purpose": purpose,
        "attempt": attempt,
        "error": error,
        "http_status": http_status,
        "retryable": retryable,
    }
    if usage is not None:
        payload["usage"] = usage
    return payload


def message_delta(*, llm_call_id: int, text: str) -> dict:
    return {"llm_call_id": llm_call_id, "text": text}


# Tool calls.


def tool_started(*, tool_invocation_id: int, tool: str, arguments: dict | None) -> dict:
    return {"tool_invocation_id": tool_invocation_id, "tool": tool, "arguments": arguments}


def tool_completed(*, tool_invocation_id: int, tool: str, status: str, truncated: bool, latency_ms: int | None) -> dict:
    return {
        "tool_invocation_id": tool_invocation_id,
        "tool": tool,
        "status": status,
        "truncated": truncated,
        "latency_ms": latency_ms,
    }


def tool_progress(*, tool_invocation_id: int, tool: str, details: dict) -> dict:
    """What a running tool learnt (a remote agent's task id and state: tools.remote_agents)."""
    return {"tool_invocation_id": tool_invocation_id, "tool": tool, "details": details}


# Approvals. Every approval event names the approval, the invocation, the call and the tool.


def _approval(approval_id: int, tool_invocation_id: int, tool_call_id: str, tool: str) -> dict:
    return {
        "approval_id": approval_id,
        "tool_invocation_id": tool_invocation_id,
        "tool_call_id": tool_call_id,
        "tool": tool,
    }


def approval_requested(
    *,
    approval_id: int,
    tool_invocation_id: int,
    tool_call_id: str,
    tool: str,
    arguments: dict | None,
    arguments_hash: str,
    why: str,
    expires_at: str | None,
) -> dict:
    return {
        **_approval(approval_id, tool_invocation_id, tool_call_id, tool),
        "arguments": arguments,
        "arguments_hash": arguments_hash,
        "why": why,
        "expires_at": expires_at,
    }


def approval_decided(
    *,
    approval_id: int,
    tool_invocation_id: int,
    tool_call_id: str,
    tool: str,
    status: str,
    channel: str,
    decided_by: str | None,
    reason: str,
    edited: bool,
    arguments: dict | None = None,
    arguments_hash: str | None = None,
    for_rest_of_run: bool | None = None,
) -> dict:
    """A decision (a person's, a run-wide grant's, or an expiry's: APPROVAL_EXPIRED uses it too).
    A grant's event carries the call's arguments; a person's, whether they were for the rest of the run."""
    payload = _approval(approval_id, tool_invocation_id, tool_call_id, tool)
    if arguments is not None:
        payload["arguments"] = arguments
    if arguments_hash is not None:
        payload["arguments_hash"] = arguments_hash
    payload.update(status=status, channel=channel, decided_by=decided_by, reason=reason, edited=edited)
    if for_rest_of_run is not None:
        payload["for_rest_of_run"] = for_rest_of_run
    return payload


def approval_escalated(
    *,
    approval_id: int,
    tool_invocation_id: int,
    tool_call_id: str,
    tool: str,
    arguments: dict | None,
    arguments_hash: str,
    why: str,
    expires_at: str | None,
    waited_minutes: int,
) -> dict:
    """A request still pending after the agent's escalation time: the request's facts again, for
    channels that never saw it, and how long it has waited."""
    return {
        **approval_requested(
            approval_id=approval_id,
            tool_invocation_id=tool_invocation_id,
            tool_call_id=tool_call_id,
            tool=tool,
            arguments=arguments,
            arguments_hash=arguments_hash,
            why=why,
            expires_at=expires_at,
        ),
        "waited_minutes": waited_minutes,
    }


def approval_cancelled(*, approval_id: int, tool_invocation_id: int, tool_call_id: str, tool: str, reason: str) -> dict:
    return {**_approval(approval_id, tool_invocation_id, tool_call_id, tool), "reason": reason}


# Guardrails.


def guardrail_triggered(*, side: str, outcome: str, triggers: list[dict]) -> dict:
    """A check of the input or the output that matched: `outcome` is what happened to the text
    (blocked, redacted or flagged), `triggers` each match as its GuardrailTrigger row has it
    (the rule's id, kind and action, and the masked match)."""
    return {"side": side, "outcome": outcome, "triggers": triggers}


# Attachments.


def part_converted(
    *, attachment_id: str, kind: str, name: str, method: str, chars: int, llm_call_id: int | None, duration_ms: int
) -> dict:
    """A part the run's models do not take, turned into text before a step (engine.part_conversion):
    which attachment, by which `method` (transcription, ocr, description, extraction), how long
    the text is and, when a model made it, its call."""
    return {
        "attachment": attachment_id,
        "kind": kind,
        "name": name,
        "method": method,
        "chars": chars,
        "llm_call_id": llm_call_id,
        "duration_ms": duration_ms,
    }


# Answers in a schema.


def answer_repair(*, llm_call_id: int | None, repair: int, of: int, errors: list[str]) -> dict:
    """A final answer that did not match the run's output schema (agents.output_schema), sent back
    to the model with `errors`: this is repair turn `repair` of at most `of`; `llm_call_id` is
    the call whose answer failed."""
    return {"llm_call_id": llm_call_id, "repair": repair, "of": of, "errors": errors}


PAYLOAD_BUILDERS: dict[EventType, Callable[..., dict]] = {
    EventType.RUN_QUEUED: run_queued,
    EventType.RUN_RUNNING: run_running,
    EventType.RUN_REQUEUED: run_requeued,
    EventType.RUN_RETRIED: run_retried,
    EventType.RUN_AWAITING_APPROVAL: run_awaiting_approval,
    EventType.RUN_AWAITING_CHILDREN: run_awaiting_children,
    EventType.RUN_CANCEL_REQUESTED: run_cancel_requested,
    EventType.RUN_COMPLETED: run_ended,
    EventType.RUN_FAILED: run_ended,
    EventType.RUN_CANCELLED: run_ended,
    EventType.RUN_EXPIRED: run_ended,
    EventType.LLM_CALL_STARTED: llm_call_started,
    EventType.LLM_CALL_COMPLETED: llm_call_completed,
    EventType.LLM_CALL_FAILED: llm_call_failed,
    EventType.MESSAGE_DELTA: message_delta,
    EventType.TOOL_STARTED: tool_started,
    EventType.TOOL_COMPLETED: tool_completed,
    EventType.TOOL_PROGRESS: tool_progress,
    EventType.APPROVAL_REQUESTED: approval_requested,
    EventType.APPROVAL_DECIDED: approval_decided,
    EventType.APPROVAL_EXPIRED: approval_decided,
    EventType.APPROVAL_CANCELLED: approval_cancelled,
    EventType.APPROVAL_ESCALATED: approval_escalated,
    EventType.GUARDRAIL_TRIGGERED: guardrail_triggered,
    EventType.PART_CONVERTED: part_converted,
    EventType.ANSWER_REPAIR: answer_repair,
}
