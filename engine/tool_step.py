"""One tool step: every tool call of one assistant message, then their results as messages.

Each call gets one ToolInvocation row (unique per run and tool call id). Calls the policy lets
through run now; calls that need a person get a pending Approval and park the run. A call that
needs approval runs only with an approved Approval bound to its tool call id whose recorded hash
matches the arguments approved, and it runs with those (possibly edited) arguments. A tool that
ran and asks a person for its result (a knowledge base hand-off) parks the same way, behind a
hand-off Approval whose answer becomes the call's result. A call is
marked `running` in a commit before it starts (its own, or for the first call of an answer that
runs at once, the answer's: engine.invocations), so after a crash a side-effecting call whose
outcome is unknown is reported, never silently repeated (at most once); idempotent ones are re-run.
An evaluation's run (Run.sandbox set) takes the results its case gives instead of calling
tools, and never executes a write tool (engine.invocations.call_decision). Calls are decided
under the approvals in force: the stricter of the version's pinned policy and the tool's now
(agents.selectors.tools_in_force), so a tightened policy applies at once to live versions.

Marking a call running, recording its outcome and appending the step's tool messages are each
one ledger batch (conversations.batch) fenced by the run's lease: one statement on PostgreSQL.
The step's last batch returns the run as it leaves it (ToolStepOutcome.run): the next step starts
from it, seeing a cancel accepted while the tools ran (engine.loop).
"""

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial

from django.db import transaction
from django.utils import timezone

from agents.selectors import tools_in_force
from agents.snapshot import AgentSnapshot, snapshot_tools
from conversations import events
from conversations.batch import (
    Batch,
    Is,
    Update,
    batch_commit,
    event_add,
    exists,
    messages_add,
    row_update,
    run_event_append,
    run_guard,
)
from conversations.events import EventType
from conversations.models import Approval, ApprovalGrant, Message, Run, ToolInvocation
from conversations.selectors import STEP_RUN_COLUMNS, run_step_row
from conversations.services import rows_insert_new
from engine.delegation import delegate_step
from engine.invocations import (
    AskApproval,
    CallDecision,
    Delegate,
    Execute,
    Settled,
    Started,
    call_decision,
    invocation_new,
    rerunnable,
    tool_live_read,
)
from engine.leases import lease_fence
from engine.next_step import Repeat, repeat_found, run_steps
from engine.tool_reports import cancel_watch, tool_reporter
from engine.tracing import tool_span
from platform_site.dbpool import release_connection
from platform_site.logs import log_context
from platform_site.text import scrub_nul
from tools.approval_policy import ApprovalPolicy
from tools.arguments import arguments_hash
from tools.executors import execute_tool
from tools.registry import ToolContext

log = logging.getLogger(__name__)

Status = ToolInvocation.Status
FINISHED = {Status.SUCCEEDED, Status.ERROR, Status.REJECTED, Status.BLOCKED, Status.CANCELLED}

STREAK_HINT = (
    "Tool {name} was not run: it has been called {count} times in a row. The information "
    "available is not enough; answer from what you already have, or ask the user."
)
CYCLE_HINT = (
    "Tools {names} were not run: the same calls with the same arguments have repeated over the last "
    "{count} steps. Repeating them will not help; answer from what you already have, or ask the user."
)


class RunCancelled(Exception):
    """A cancel was accepted while the step ran: no further tool of the step may start."""


@dataclass
class ToolStepOutcome:
    parked: bool = False
    loop: Repeat | None = None
    cancelled: bool = False
    # A step that ran to its end: the tool messages its last commit appended and the run as that
    # commit left it (the next step starts from them instead of reading the run again).
    messages: list[Message] = field(default_factory=list)
    run: Run | None = None


def _hint(repeat: Repeat) -> str:
    if repeat.cycle:
        return CYCLE_HINT.format(names=", ".join(repeat.names), count=repeat.steps)
    return STREAK_HINT.format(name=repeat.names[0], count=repeat.steps)


def _step_invocations(
    *, run: Run, message: Message, tools: dict, made: list[ToolInvocation] | None = None
) -> tuple[list[ToolInvocation], set[int]]:
    """One row per tool call of the step, in call order: created once, read back after a crash.
    Also returns the ids of the rows created now (no approval can exist for those yet).

    `made`: the rows the model's answer was recorded with (engine.invocations), when the step
    follows that record in the same slice; they are the step's rows if every call got one.
    Otherwise they are inserted here with ON CONFLICT DO NOTHING on (run, tool_call_id), so a step
    taken again never duplicates a row and never overwrites one that already records what
    happened; only rows that were there already are read."""
    if made is not None and len(made) == len(message.tool_calls) and all(row.pk is not None for row in made):
        return made, {row.pk for row in made}
    rows = [
        invocation_new(run=run, llm_call_id=message.llm_call_id, position=i, call=call, tools=tools)
        for i, call in enumerate(message.tool_calls)
    ]
    fresh = rows_insert_new(rows, unique=("run", "tool_call_id"), key="tool_call_id")
    if len(fresh) == len(rows):
        return rows, {row.pk for row in fresh}
    found = {row.tool_call_id: row for row in fresh}
    earlier = [row.tool_call_id for row in rows if row.tool_call_id not in found]
    found.update({inv.tool_call_id: inv for inv in ToolInvocation.objects.filter(run=run, tool_call_id__in=earlier)})
    return [found[row.tool_call_id] for row in rows], {row.pk for row in fresh}


def _finish(
    invocation: ToolInvocation,
    *,
    owner: str,
    status: str,
    result: str,
    error: str = "",
    truncated=False,
    latency_ms=None,
    simulated: bool = False,
) -> Batch:
    """The call's outcome, with its event, as a batch for the caller to commit (tool_step
    commits the step's last outcome together with the step's tool messages)."""
    payload = events.tool_completed(
        tool_invocation_id=invocation.pk,
        tool=invocation.tool_name,
        status=status,
        truncated=truncated,
        latency_ms=latency_ms,
    )
    batch = Batch()
    # The run as the commit leaves it: the step's last one hands it to the next step (engine.loop).
    run_guard(batch, run_id=invocation.run_id, lease_owner=owner, returning=STEP_RUN_COLUMNS)
    row_update(
        batch,
        "invocation",
        invocation,
        status=status,
        result=result,
        error=error,
        truncated=truncated,
        latency_ms=latency_ms,
        simulated=simulated,
        finished_at=timezone.now(),
    )
    event_add(batch, run_id=invocation.run_id, type=EventType.TOOL_COMPLETED, payload=payload)
    return batch


def _approval_open(
    *, run: Run, owner: str, invocation: ToolInvocation, spec: dict, why: str, handoff_result: str | None = None
) -> Approval:
    """The call's Approval, written under the run's lease: pending until a person decides and
    expiring as the tool's approvals do, or approved at once if a person already approved this
    tool for the rest of the run (the call still gets its own row, bound to its arguments).

    `handoff_result`: the tool ran and asks a person for its result (a knowledge base that found
    nothing): a hand-off, never covered by a grant, and until someone answers the call's result
    holds what the model reads if nobody does."""
    now = timezone.now()
    timeout = spec["approval"]["timeout_seconds"]
    handoff = handoff_result is not None
    fields = {
        "run_id": invocation.run_id,
        "tool_call_id": invocation.tool_call_id,
        "kind": Approval.Kind.HANDOFF if handoff else Approval.Kind.TOOL_CALL,
        "arguments": invocation.arguments,
        "arguments_hash": arguments_hash(invocation.arguments),
        "request_reason": why[:500],
        "expires_at": now + timedelta(seconds=timeout) if timeout else None,
    }
    with transaction.atomic():
        lease_fence(run_id=run.pk, owner=owner)
        grant = None
        if not handoff:
            grant = ApprovalGrant.objects.filter(run_id=run.pk, tool_name=invocation.tool_name).first()
        if grant is not None:
            fields.update(
                status=Approval.Status.APPROVED,
                decided_by_id=grant.granted_by_id,
                decided_at=now,
                channel=Approval.Channel.RUN_GRANT,
                reason=f"approved for the rest of the run with approval #{grant.approval_id}",
                expires_at=None,
            )
        approval, created = Approval.objects.get_or_create(invocation=invocation, defaults=fields)
        if approval.status == Approval.Status.PENDING:
            parked = {"status": Status.AWAITING_APPROVAL} | ({"result": handoff_result} if handoff else {})
            waiting = Status.RUNNING if handoff else Status.PENDING
            ToolInvocation.objects.filter(pk=invocation.pk, status=waiting).update(**parked)
            for name, value in parked.items():
                setattr(invocation, name, value)
        if created:
            _approval_event(invocation, approval, grant)
    return approval


def _approval_event(invocation: ToolInvocation, approval: Approval, grant: ApprovalGrant | None) -> None:
    named = {
        "approval_id": approval.pk,
        "tool_invocation_id": invocation.pk,
        "tool_call_id": invocation.tool_call_id,
        "tool": invocation.tool_name,
        "arguments": invocation.arguments,
        "arguments_hash": approval.arguments_hash,
    }
    if grant is None:
        expires_at = approval.expires_at.isoformat() if approval.expires_at else None
        payload = events.approval_requested(**named, why=approval.request_reason, expires_at=expires_at)
        run_event_append(run_id=invocation.run_id, type=EventType.APPROVAL_REQUESTED, payload=payload)
    else:
        payload = events.approval_decided(
            **named,
            status=approval.status,
            channel=approval.channel,
            decided_by=grant.granted_by.get_username(),
            reason=approval.reason,
            edited=False,
        )
        run_event_append(run_id=invocation.run_id, type=EventType.APPROVAL_DECIDED, payload=payload)


def _mark_running(*, run: Run, owner: str, invocation: ToolInvocation, spec: dict, arguments: dict) -> dict | None:
    """Mark the call running, with its event, in a commit of its own before it starts, and read
    the tool's live state (switched off since the snapshot?) in the same statement. None if the
    call was not marked: the lease is lost, a cancel was accepted since the step began (checking
    it in the guard costs nothing on the usual path), or the call is not pending."""
    if invocation.status not in (Status.PENDING, Status.AWAITING_APPROVAL):
        return None
    batch = Batch()
    waiting = exists(ToolInvocation, id=invocation.pk, status__in=(Status.PENDING, Status.AWAITING_APPROVAL))
    run_guard(batch, run_id=run.pk, lease_owner=owner, where=(Is("cancel_requested", False), waiting))
    started = Update(ToolInvocation).set(status=Status.RUNNING, started_at=timezone.now())
    batch.add("invocation", started.where(id=invocation.pk))
    tool_live_read(batch, spec)
    payload = events.tool_started(tool_invocation_id=invocation.pk, tool=invocation.tool_name, arguments=arguments)
    event_add(batch, run_id=run.pk, type=EventType.TOOL_STARTED, payload=payload)
    results = batch.execute()
    if results is None:
        return None
    return results.get("tool", {})


def _execute(
    *, run: Run, owner: str, invocation: ToolInvocation, spec: dict, arguments: dict, live: dict | None = None
) -> Batch | None:
    """Run the call; None when it was parked for a person (a hand-off). `live`: the tool's live
    state, when the answer's commit marked the call started already (engine.invocations)."""
    marked = live
    if marked is None:
        marked = _mark_running(run=run, owner=owner, invocation=invocation, spec=spec, arguments=arguments)
    if marked is None:
        lease_fence(run_id=run.pk, owner=owner)
        if Run.objects.filter(pk=run.pk, cancel_requested=True).exists():
            raise RunCancelled(str(run.pk))
        if not rerunnable(spec):
            return _finish(
                invocation,
                owner=owner,
                status=Status.ERROR,
                error="interrupted",
                result=f"Tool {spec['name']} was interrupted and its outcome is unknown; it was not run "
                "again to avoid doing it twice. Tell the user, and do not assume it succeeded.",
            )
    ctx = ToolContext(
        run_id=str(run.pk),
        tool_call_id=invocation.tool_call_id,
        idempotency_key=invocation.idempotency_key,
        report=tool_reporter(run_id=run.pk, owner=owner, invocation=invocation),
        cancelled=cancel_watch(run_id=run.pk),
    )
    started = time.monotonic()
    release_connection()
    # A tool is blocking code: it runs on a thread of the executors' pool, which a worker's
    # engine loop awaits while it carries the other runs (platform_site.green.wait).
    live = marked or None  # read with the mark; a call taken again without one reads it itself
    outcome = scrub_nul(execute_tool(spec=spec, arguments=arguments, ctx=ctx, live=live))
    tool_span(invocation=invocation, started=started, status=outcome.status, error=outcome.error)
    if outcome.status == "handoff":
        _approval_open(
            run=run, owner=owner, invocation=invocation, spec=spec, why=outcome.question, handoff_result=outcome.content
        )
        return None
    return _finish(
        invocation,
        owner=owner,
        status=outcome.status,
        result=outcome.content,
        error=outcome.error,
        truncated=outcome.truncated,
        latency_ms=int((time.monotonic() - started) * 1000),
    )


def _approval_found(invocation: ToolInvocation, spec: dict | None, fresh: bool) -> Approval | None:
    """The call's approval, read only where one can exist: not under "never" (the run's policy is
    pinned) nor for a call whose row this step created, unless the call is parked for a person
    (a hand-off has its approval whatever the tool's policy)."""
    asks = (spec is not None and spec["approval"]["policy"] != ApprovalPolicy.NEVER and not fresh) or (
        invocation.status == Status.AWAITING_APPROVAL
    )
    return Approval.objects.filter(invocation=invocation).first() if asks else None


def _process_call(
    *,
    run,
    owner,
    invocation: ToolInvocation,
    spec: dict | None,
    blocked_hint: str | None,
    fresh: bool,
    started: Started | None = None,
) -> Batch | None:
    """Decide on the call (engine.invocations.call_decision) and carry it out; its outcome (None
    while it waits for a person) is returned as a batch to commit. A call the answer's commit
    `started` was decided then (engine.invocations.runs_at_once): it runs."""
    with log_context(tool_invocation_id=invocation.pk):
        if started is not None:
            decision = Execute(invocation.arguments)
        else:
            decide = partial(call_decision, invocation=invocation, spec=spec, blocked=blocked_hint, sandbox=run.sandbox)
            decision = decide(approval=_approval_found(invocation, spec, fresh))
            if isinstance(decision, AskApproval):
                decision = decide(
                    approval=_approval_open(run=run, owner=owner, invocation=invocation, spec=spec, why=decision.why)
                )
        outcome = _carry_out(
            decision, run=run, owner=owner, invocation=invocation, spec=spec, fresh=fresh, started=started
        )
        log.info("tool %s: %s", invocation.tool_name, invocation.status)
    return outcome


def _carry_out(
    decision: CallDecision, *, run, owner, invocation: ToolInvocation, spec, fresh: bool, started: Started | None
) -> Batch | None:
    if isinstance(decision, Settled):
        return _finish(
            invocation,
            owner=owner,
            status=decision.status,
            result=decision.result,
            error=decision.error,
            truncated=decision.truncated,
            simulated=decision.simulated,
        )
    if isinstance(decision, Execute):
        live = started.live if started is not None else None
        return _execute(run=run, owner=owner, invocation=invocation, spec=spec, arguments=decision.arguments, live=live)
    if isinstance(decision, Delegate):
        delegated = delegate_step(run=run, owner=owner, invocation=invocation, spec=spec, fresh=fresh)
        return None if delegated is None else _finish(invocation, owner=owner, **delegated)
    return None  # Wait: the run parks until a person decides


def _tool_message(invocation: ToolInvocation, approval: Approval | None) -> str:
    """The tool result the model reads; it is told when a person changed the arguments."""
    if (
        approval is not None
        and approval.status == Approval.Status.APPROVED
        and approval.arguments_hash != arguments_hash(invocation.arguments or {})
    ):
        edited = json.dumps(approval.arguments, ensure_ascii=False, sort_keys=True)
        return f"[A reviewer changed the arguments before approving; the tool ran with {edited}]\n{invocation.result}"
    return invocation.result


def _started_now(invocation: ToolInvocation, started: Started | None) -> Started | None:
    """`started` if it is this call's mark, made by the answer's commit of this slice: a call
    found running otherwise was marked by a worker that stopped (its outcome is unknown)."""
    if started is not None and started.invocation_id == invocation.pk and invocation.status == Status.RUNNING:
        return started
    return None


def tool_step(
    *,
    run: Run,
    owner: str,
    snapshot: AgentSnapshot,
    messages: list[Message],
    current: Message,
    made: list[ToolInvocation] | None = None,
    started: Started | None = None,
) -> ToolStepOutcome:
    """`made`: the calls' rows as the answer's record wrote them (see _step_invocations);
    `started`: the call the answer's commit marked started, if it did (engine.invocations)."""
    tools = snapshot_tools(snapshot)
    repeat = repeat_found(run_steps(messages, current.run_id), snapshot["agent"]["max_same_tool_streak"])
    invocations, fresh = _step_invocations(run=run, message=current, tools=tools, made=made)
    undecided = [inv.tool_name for inv in invocations if inv.status not in FINISHED and not _started_now(inv, started)]
    if undecided:
        # Decided under the approvals in force now: a tool policy tightened since the version
        # was pinned applies at once (agents.selectors.tools_in_force).
        tools = tools_in_force(snapshot=snapshot, names=undecided)
    blocked_hint = None
    if repeat is not None:
        blocked_hint = _hint(repeat)
        # The model already had the hint during this repeat and made the calls again: stop the
        # run, and close this step's calls so no invocation is left pending.
        earlier = [call["id"] for message in repeat.earlier for call in message.tool_calls]
        if ToolInvocation.objects.filter(run=run, tool_call_id__in=earlier, status=Status.BLOCKED).exists():
            for invocation in invocations:
                if invocation.status not in FINISHED:
                    outcome = _finish(
                        invocation, owner=owner, status=Status.BLOCKED, result=blocked_hint, error="tool loop"
                    )
                    batch_commit(outcome, run.pk, asynchronous=False)
            return ToolStepOutcome(loop=repeat)
    # A call's outcome commits before the next call starts; the last one commits with the
    # step's tool messages, in one statement. Both asynchronously (conversations.batch): the next call's mark,
    # the next model request and the run's end commit synchronously, and a database crash before
    # them leaves the call as a worker's crash after the tool would.
    outcome = None
    try:
        for invocation in invocations:
            if invocation.status not in FINISHED:
                if outcome is not None:
                    batch_commit(outcome, run.pk)
                outcome = _process_call(
                    run=run,
                    owner=owner,
                    invocation=invocation,
                    spec=tools.get(invocation.tool_name),
                    blocked_hint=blocked_hint,
                    fresh=invocation.pk in fresh,
                    started=_started_now(invocation, started),
                )
    except RunCancelled:
        return ToolStepOutcome(cancelled=True)
    # Running after the calls were taken: a delegate call whose child run is active (engine.delegation).
    if any(inv.status in (Status.AWAITING_APPROVAL, Status.RUNNING) for inv in invocations):
        if outcome is not None:
            batch_commit(outcome, run.pk, asynchronous=False)
        return ToolStepOutcome(parked=True)
    # Under "never" no approval can exist for the call (its policy is pinned): skip the lookup.
    asking = [
        inv
        for inv in invocations
        if (tools.get(inv.tool_name) or {}).get("approval", {}).get("policy") not in (None, ApprovalPolicy.NEVER)
    ]
    approvals = {a.invocation_id: a for a in Approval.objects.filter(invocation__in=asking)} if asking else {}
    batch = outcome
    if batch is None:
        batch = Batch()
        run_guard(batch, run_id=run.pk, lease_owner=owner, returning=STEP_RUN_COLUMNS)
    messages = messages_add(
        batch,
        conversation_id=run.conversation_id,
        run_id=run.pk,
        messages=[
            {
                "role": Message.Role.TOOL,
                "content": _tool_message(inv, approvals.get(inv.pk)),
                "tool_call_id": inv.tool_call_id,
                "name": inv.tool_name,
            }
            for inv in invocations
        ],
    )
    results = batch_commit(batch, run.pk)
    return ToolStepOutcome(messages=messages, run=run_step_row(results["run"], run.conversation))
