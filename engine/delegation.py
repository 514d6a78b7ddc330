"""Agents as tools: a tool call that starts a run of another agent, and the parent's wait for it.

A delegate tool (agents.models.AgentDelegate, pinned in the parent's snapshot with kind
DELEGATE_KIND) is not executed by a worker: the tool step starts a child run of the delegated
agent in a conversation of its own (the parent conversation's owner owns it), linked to the
parent run and to the call's ToolInvocation, and the call stays `running`. Every delegate call
of a step starts its child in that step, so the children run in parallel on the workers.

The parent then parks in `awaiting_children` (run_park_for_children) without holding a worker.
When a child ends, run_finish calls child_ended: the child's usage is added to the parent's
tree totals (children_tokens, children_cost), and once no child of the parent is active the
parent is queued again; its step, taken again, reads each child's outcome as the call's result
(the answer, or a tool error the model can read). A parent parked for approvals is queued by
the decision instead, and parks again for the children still running.

Access: a child runs only for a conversation owner who may use its agent directly (the
owner reads the child's conversation, runs and export); otherwise the call is refused with a
readable error (docs/delegation.md).

Bounds: a child's deadline is at most its parent's, the parent's budgets count the tree (a
child that ends with the tree over the parent's budget queues the parent at once, whose next
step stops it, and its end cancels the children still active, recursively: engine.runs), the
depth limit and cycle refusal are checked again here, where a pinned version may hold a
delegate that the current graph no longer allows.

Lock order: the parent's step locks the parent's row, then writes the child; a child's end
locks the child's row, then the parent's. Nothing locks a child while holding its parent.
"""

import json
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.models import Agent
from agents.selectors import agents_usable
from agents.services import agent_version_current
from agents.snapshot import DELEGATE_KIND, AgentSnapshot, ToolSpec, snapshot_parse
from conversations import events
from conversations.batch import Batch, Row, Update, exists, run_event_append
from conversations.events import EventType
from conversations.models import (
    TERMINAL_STATUSES,
    Approval,
    Conversation,
    Message,
    Run,
    RunStatus,
    RunTrigger,
    StopReason,
    ToolInvocation,
)
from engine.dispatch import ACTIVE_STATUSES, run_admit, run_enqueue, run_started_record
from engine.leases import lease_fence
from engine.limits import budget_limit
from engine.snapshots import version_snapshot
from engine.tracing import run_trace_fields
from engine.transitions import run_transition

Status = ToolInvocation.Status


def may_delegate(snapshot: AgentSnapshot) -> bool:
    """Whether runs of this version can start children: it lists a delegate tool."""
    return any(tool["kind"] == DELEGATE_KIND for tool in snapshot["tools"])


def _task_text(arguments: dict) -> str:
    """The child's user message: the task, and the structured fields as JSON after it."""
    text = str(arguments.get("task", ""))
    fields = arguments.get("fields")
    if fields:
        text += "\n\nFields (JSON):\n" + json.dumps(fields, ensure_ascii=False, sort_keys=True)
    return text


def _refusal(*, run: Run, spec: ToolSpec) -> str | None:
    """Why this run may not start the delegate's child now (told to the model), or None."""
    name, child_id = spec["name"], spec["delegate"]["agent_id"]
    limit = settings.AGENTRY_DELEGATION_MAX_DEPTH
    if run.depth + 1 > limit:
        return (
            f"{name} was not called: delegated runs may go {limit} levels deep and this run is already "
            f"{run.depth} levels deep. Do the task yourself or answer with what you have."
        )
    agents, parent_id = {run.agent_id}, run.parent_run_id
    while parent_id is not None:
        row = Run.objects.filter(pk=parent_id).values("agent_id", "parent_run_id").first()
        if row is None:
            break
        agents.add(row["agent_id"])
        parent_id = row["parent_run_id"]
    if child_id in agents:
        return (
            f"{name} was not called: its agent is already working on this request higher up, and an "
            "agent cannot delegate to itself, directly or through others. Do the task yourself."
        )
    # The conversation's agent is the top of the chain: a delegate must be of its workspace.
    owner = (
        Conversation.objects.filter(pk=run.conversation_id)
        .values("owner_id", "owner__is_superuser", "agent__workspace_id")
        .first()
    )
    workspace_id = owner["agent__workspace_id"] if owner else None
    # Another workspace's agent reads as one that is gone: nothing of it is said.
    if not Agent.objects.filter(pk=child_id, is_active=True, workspace_id=workspace_id).exists():
        return f"{name} was not called: its agent is no longer available."
    # Delegation never widens access: the child's conversation is the caller's, who reads it
    # (and its export), so a caller who may not use the child agent directly gets no run of it.
    if owner and owner["owner_id"] is not None:
        usable = agents_usable(
            user_id=owner["owner_id"], superuser=owner["owner__is_superuser"], workspace_id=workspace_id
        )
        if not usable.filter(pk=child_id).exists():
            return (
                f"{name} was not called: its agent is not available to the user of this conversation. "
                "Do the task yourself or answer with what you have."
            )
    return None


def _child_start(*, run: Run, owner: str, invocation: ToolInvocation, spec: ToolSpec) -> Run:
    """The child run, with the call marked running, in one transaction fenced by the parent's
    lease: after a crash the call either has its child or is still pending."""
    agent = Agent.objects.get(pk=spec["delegate"]["agent_id"])
    content = _task_text(invocation.arguments or {})
    now = timezone.now()
    with transaction.atomic():
        lease_fence(run_id=run.pk, owner=owner)
        ToolInvocation.objects.filter(pk=invocation.pk, status=Status.PENDING).update(
            status=Status.RUNNING, started_at=now
        )
        run_event_append(
            run_id=run.pk,
            type=EventType.TOOL_STARTED,
            payload=events.tool_started(
                tool_invocation_id=invocation.pk, tool=invocation.tool_name, arguments=invocation.arguments
            ),
        )
        version = agent_version_current(agent=agent)
        owner_id = Conversation.objects.filter(pk=run.conversation_id).values_list("owner_id", flat=True).first()
        conversation = Conversation.objects.create(
            agent=agent,
            owner_id=owner_id,
            title=content[:200],
            metadata={"parent_run": str(run.pk), "parent_tool_invocation": invocation.pk},
        )
        timeout = snapshot_parse(version.snapshot)["agent"]["run_timeout_seconds"]
        deadlines = [d for d in (now + timedelta(seconds=timeout) if timeout else None, run.deadline) if d]
        child = Run.objects.create(
            conversation=conversation,
            agent=agent,
            agent_version=version,
            deadline=min(deadlines) if deadlines else None,
            enqueued_at=now,
            parent_run=run,
            parent_tool_invocation=invocation,
            depth=run.depth + 1,
            trigger=RunTrigger.DELEGATION,
            # A fork's child is sandboxed like the fork (engine.forks), with its own version's model.
            sandbox={k: v for k, v in run.sandbox.items() if k != "model"} if run.sandbox else None,
            # Taken inside the parent's step: with tracing on, the child's trace continues the parent's.
            **run_trace_fields(),
        )
        run_started_record(
            run=child,
            user_id=owner_id,
            content=content,
            version_number=version.number,
            reason=f"delegated by run {run.pk}",
        )
        run_admit(child, content, stamped=True)
    invocation.status = Status.RUNNING
    return child


def _child_answer(child: Run) -> str:
    last = (
        Message.objects.filter(run=child, role=Message.Role.ASSISTANT)
        .order_by("-order")
        .values_list("content", flat=True)
        .first()
    )
    return last or ""


def _child_outcome(child: Run, spec: ToolSpec) -> dict:
    """What the call records once its child ended: the answer, or an error the model can read."""
    name = spec["name"]
    if child.status == RunStatus.COMPLETED and child.stop_reason == StopReason.FINAL_ANSWER:
        answer = _child_answer(child)
        limit = spec["max_result_chars"]
        return {
            "status": Status.SUCCEEDED,
            "result": answer[:limit],
            "truncated": len(answer) > limit,
        }
    if child.status == RunStatus.COMPLETED:
        said = _child_answer(child)
        result = f"{name} stopped without a final answer ({child.stop_reason}). It said: {said}"
    elif child.status == RunStatus.FAILED:
        # A provider's error is the model's business; an internal error's traceback is not.
        why = child.error.strip().splitlines()[0][:300] if child.stop_reason == StopReason.PROVIDER_ERROR else ""
        result = f"{name} failed ({child.stop_reason}){': ' + why if why else ''}. Its task was not done."
    elif child.status == RunStatus.CANCELLED:
        result = f"{name} was cancelled before it answered. Its task was not done."
    else:
        result = f"{name} ended {child.status} ({child.stop_reason}) before it answered. Its task was not done."
    return {"status": Status.ERROR, "result": result, "error": f"delegated run {child.status}"}


def delegate_step(*, run: Run, owner: str, invocation: ToolInvocation, spec: ToolSpec, fresh: bool) -> dict | None:
    """A delegate call in the tool step: its outcome (the fields tool_step records), or None
    while its child is active (the call stays running and the step parks for it).

    A call without a child starts one (or is refused with a readable error); `fresh`: the step
    created the call's row now, so it has no child yet."""
    child = None if fresh else Run.objects.filter(parent_tool_invocation=invocation).order_by("created_at").last()
    if child is None:
        refusal = _refusal(run=run, spec=spec)
        if refusal is not None:
            return {"status": Status.ERROR, "result": refusal, "error": "delegation refused"}
        _child_start(run=run, owner=owner, invocation=invocation, spec=spec)
        return None
    if child.status in TERMINAL_STATUSES:
        return _child_outcome(child, spec)
    invocation.status = Status.RUNNING
    return None


# On a tool invocation's row: the call is a delegate call that started a child run. Answered by
# run_parent_tool_call_idx, a partial index the equality lets it use.
HAS_CHILD = exists(Run, parent_tool_invocation_id=Row("id"))


def delegate_calls_close(batch: Batch, *, run_id, status: str, now) -> None:
    """With the change that ends a run (engine.runs._open_calls_close): its delegate calls still
    running are cancelled. Their outcome is known, unlike an ordinary call a worker left open: the
    run's end cancels the children still active (engine.runs._children_cancel), and an answer a
    child gave meanwhile is never read. The other running calls' update leaves these out
    (HAS_CHILD): in one statement a row must not be updated twice."""
    cancelled = Update(ToolInvocation).set(
        status=Status.CANCELLED,
        error=f"run {status}",
        finished_at=now,
        result=f"The run was {status} before it read this call's answer; its delegated run, if still working, "
        "was cancelled with it.",
    )
    batch.add("cancelled_delegate_calls", cancelled.where(run_id=run_id, status=Status.RUNNING).where(HAS_CHILD))


def run_park_for_children(*, run_id, owner: str) -> bool:
    """Park a running run until the children its step started have ended. False (the run stays
    running, and takes its step again) when none is active any more, or a cancel was accepted."""
    with transaction.atomic():
        # The parent's row lock orders this against child_ended, which locks it too.
        run = Run.objects.select_for_update().filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner).first()
        if run is None or run.cancel_requested:
            return False
        if Approval.objects.filter(run_id=run_id, status=Approval.Status.PENDING).exists():
            return False
        active = [
            str(pk)
            for pk in Run.objects.filter(parent_run_id=run_id, status__in=ACTIVE_STATUSES).values_list("pk", flat=True)
        ]
        if not active:
            return False
        return run_transition(
            run_id=run_id,
            to=RunStatus.AWAITING_CHILDREN,
            expect=[RunStatus.RUNNING],
            owner=owner,
            payload=events.run_awaiting_children(children=active),
        )


def _over_budget(parent: Run, snapshot: AgentSnapshot) -> bool:
    return budget_limit(parent, snapshot, usage_today=None) is not None


def child_ended(*, parent_run_id, child_run_id) -> None:
    """A child ended (run_finish, inside or right after its end): count its tree into the
    parent's, and queue the parent when nothing of its children is active any more, or when
    the tree used up the parent's budget (its next step stops it and cancels the rest)."""
    with transaction.atomic():
        used = Run.objects.filter(pk=child_run_id).values("total_tokens", "cost", "children_tokens", "children_cost")[0]
        Run.objects.filter(pk=parent_run_id).update(
            children_tokens=F("children_tokens") + used["total_tokens"] + used["children_tokens"],
            children_cost=F("children_cost") + used["cost"] + used["children_cost"],
        )
        parent = (
            Run.objects.select_for_update()
            .only("status", "agent_version", "total_tokens", "cost", "children_tokens", "children_cost")
            .get(pk=parent_run_id)
        )
        if parent.status != RunStatus.AWAITING_CHILDREN:
            return
        over = _over_budget(parent, version_snapshot(parent.agent_version_id))
        if not over and Run.objects.filter(parent_run_id=parent_run_id, status__in=ACTIVE_STATUSES).exists():
            return
        if run_transition(
            run_id=parent_run_id,
            to=RunStatus.QUEUED,
            expect=[RunStatus.AWAITING_CHILDREN],
            payload=events.run_queued(reason="delegated runs used up the budget" if over else "delegated runs ended"),
        ):
            run_enqueue(run_id=parent_run_id)


def tree_budget_finish(run: Run, snapshot: AgentSnapshot):
    """next_step's check for a run whose delegated runs used something: its budgets count the
    tree, and a tree over budget stops the run even with calls pending (the Limit, or None)."""
    if not (run.children_tokens or run.children_cost):
        return None
    return budget_limit(run, snapshot, usage_today=None)
