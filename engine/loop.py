"""The agent loop: claim a run, then take steps until it ends or parks.

Every step ends with a commit, so any step can be re-run by another worker after a crash (a tool
step's is held for the statement that follows it, usually the next model call's attempt row:
engine.held). A
step starts from the run and its messages as the database holds them: read when the worker
claims the run (and after a step that parked, waited on others or folded the history into the
summary), otherwise as the previous step's own commit left them. That commit's guard returns
the run's row (its totals, and the cancel flag as it was when the commit was made) and the
step knows the messages it appended; nothing else writes to a running run's conversation, and
every later write is fenced by the lease, so reading them again would only repeat what the
commit said. What the next step is, engine.next_step decides from the run, its messages and its
snapshot (call the model, run the tools the model asked for, or finish); this module executes
that decision and turns what the execution found (a tool loop, approvals to wait for, a failed
model call) into the run's next status.
"""

import contextlib
import logging
import time
import traceback
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents.snapshot import AgentSnapshot
from conversations import events
from conversations.models import Message, Run, RunStatus, StopReason, ToolInvocation
from engine.context import step_history, step_read
from engine.delegation import run_park_for_children
from engine.dispatch import run_enqueue
from engine.guardrails import input_check, output_enforce
from engine.held import commit_flush, commit_hold
from engine.invocations import Started
from engine.leases import LeaseLost, process_owner, renewer, run_claim_read
from engine.limits import daily_usage, timeout_limit
from engine.llm_step import EMPTY_ANSWER_MESSAGE, llm_step
from engine.model_call import CancelAccepted, DeadlineReached, EmptyAnswer, ModelStepFailed
from engine.next_step import Finish, RunTools, next_step
from engine.runs import run_finish, run_park_for_approval
from engine.snapshots import version_snapshot
from engine.speech import agent_says
from engine.tool_step import ToolStepOutcome, tool_step
from engine.tracing import run_slice
from engine.transitions import run_transition
from platform_site.logs import log_context

log = logging.getLogger(__name__)

TOOL_LOOP_MESSAGE = _(
    "I stopped here: I kept calling {tools} without getting closer to an answer. "
    "Please rephrase the question or give me more details."
)


def _finish(run_id, finish: Finish, listening: bool | None = None) -> bool:
    """End the run as decided: a limit ends it completed with the reason said, like an answer.
    `listening`: whether a webhook hears the run, if the step read it (engine.runs.run_finish)."""
    run_finish(
        run_id=run_id,
        status=finish.status,
        stop_reason=finish.reason,
        final_message=finish.message,
        listening=listening,
    )
    return False


def _tools_named(snapshot: AgentSnapshot, names: list[str]) -> str:
    named = _("the tool {name}") if len(names) == 1 else _("the tools {names}")
    return agent_says(snapshot, named, name=names[0], names=", ".join(names))


@dataclass
class Carried:
    """What the next step would read, as the previous step's commit left it."""

    run: Run
    messages: list[Message]
    # The rows of the last message's tool calls, written with it (engine.invocations).
    invocations: list[ToolInvocation] | None = None
    # The call that commit marked started (engine.llm_step): the next step runs it.
    started: Started | None = None


def _step(run_id, owner: str, carried: Carried | None = None) -> bool | Carried:
    """Take one step (from `carried`, else from what is read now). Returns whether the loop
    should go on: True, or what the next step starts from.

    A cancel is honoured at every step boundary: here (as of the previous step's commit, or the
    read), before each tool starts (tool_step), and when a model call returns (run_finish ends a
    run whose cancel was accepted as cancelled, so an answer that arrives late is kept in the
    ledger but never delivered as the answer)."""
    run, messages = (carried.run, carried.messages) if carried else step_read(run_id=run_id)
    if run.status != RunStatus.RUNNING or run.lease_owner != owner:
        raise LeaseLost(str(run_id))
    snapshot = version_snapshot(run.agent_version_id)
    if carried and carried.started:
        # next_step decided this step when the answer's commit started its first call
        # (engine.llm_step): the call runs, whatever a check made now would say.
        return _tools(run=run, owner=owner, snapshot=snapshot, messages=messages, carried=carried)
    now = timezone.now()
    # The day's usage is one read, and only a model call can be stopped by it: a tool step skips it.
    calls_model = messages[-1].role != Message.Role.ASSISTANT
    usage_today = daily_usage(run, snapshot, now=now) if calls_model else None
    step = next_step(run, messages, snapshot, now=now, usage_today=usage_today)
    if isinstance(step, Finish):
        return _finish(run.pk, step)
    if isinstance(step, RunTools):
        return _tools(run=run, owner=owner, snapshot=snapshot, messages=messages, carried=carried)
    return _call_model(run=run, owner=owner, snapshot=snapshot, messages=messages)


def _tools(
    *, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message], carried: Carried | None
) -> bool | Carried:
    """Run the tool calls of the last message, the model's."""
    made, started = (carried.invocations, carried.started) if carried else (None, None)
    outcome = tool_step(
        run=run,
        owner=owner,
        snapshot=snapshot,
        messages=messages,
        current=messages[-1],
        made=made,
        started=started,
        hold=True,
    )
    return _after_tools(run=run, owner=owner, snapshot=snapshot, messages=messages, outcome=outcome)


def _after_tools(
    *, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message], outcome: ToolStepOutcome
) -> bool | Carried:
    if outcome.cancelled:
        # Tool calls the model asked for and that never ran get their rows (cancelled) from run_finish.
        return _finish(run.pk, Finish(StopReason.CANCELLED))
    if outcome.loop:
        message = agent_says(snapshot, TOOL_LOOP_MESSAGE, tools=_tools_named(snapshot, outcome.loop.names))
        return _finish(run.pk, Finish(StopReason.TOOL_LOOP, message))
    if outcome.parked:
        # Not parked means every approval was decided and every delegated run ended while the
        # step ran: take the step again.
        parked = run_park_for_approval(run_id=run.pk, owner=owner) or run_park_for_children(run_id=run.pk, owner=owner)
        return not parked
    if outcome.held is not None:
        # Made with the next statement (engine.held): the next step starts from the run as the
        # step found it, the tool step having changed none of what it reads (a cancel accepted
        # meanwhile is checked by that statement).
        commit_hold(run.pk, outcome.held)
        return Carried(run, [*messages, *outcome.messages])
    return Carried(outcome.run, [*messages, *outcome.messages])


def _call_model(*, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message]) -> bool | Carried:
    summary_through = run.conversation.context_summary_through
    try:
        if run.iterations == 0:
            # The user's message is checked once, before the model first sees it (a moderation
            # rule's call can fail or run out of time like the step's own).
            blocked = input_check(run=run, owner=owner, snapshot=snapshot, messages=messages)
            if blocked is not None:
                return _finish(run.pk, blocked)
        result = llm_step(run=run, owner=owner, snapshot=snapshot, messages=messages)
    except CancelAccepted:
        return _finish(run.pk, Finish(StopReason.CANCELLED))
    except DeadlineReached:
        limit = timeout_limit(snapshot)
        return _finish(run.pk, Finish(limit.stop_reason, limit.message))
    except EmptyAnswer:
        # Like the limits, a model that gave no answer ends the run completed with the reason
        # said to the user (failed is for runs the platform could not carry out).
        return _finish(run.pk, Finish(StopReason.EMPTY_ANSWER, agent_says(snapshot, EMPTY_ANSWER_MESSAGE)))
    except ModelStepFailed as exc:
        run_finish(run_id=run.pk, status=RunStatus.FAILED, stop_reason=StopReason.PROVIDER_ERROR, error=str(exc))
        return False
    if result.guardrail is not None:
        blocked = output_enforce(run=run, owner=owner, review=result.guardrail)
        if blocked is not None:
            return _finish(run.pk, blocked)
    if result.ending is not None:
        # The answer's commit ended the run (engine.runs.AnswerEnding): what follows an ending.
        result.ending.follow()
        return False
    if not result.message.tool_calls:
        return _finish(run.pk, Finish(StopReason.FINAL_ANSWER), listening=result.listening)
    # The calls it asked for start in the next step, which begins by checking for a cancel
    # (unless the answer's commit started the first one, having checked it: engine.llm_step).
    if run.conversation.context_summary_through != summary_through:
        # The history was folded into the summary: the next step starts from what is left,
        # read now, with the calls' rows as the answer's commit wrote them.
        return Carried(*step_read(run_id=run.pk), result.invocations, result.started)
    return Carried(result.run, [*messages, result.message], result.invocations, result.started)


def run_advance(*, run_id) -> None:
    with log_context(run_id=run_id), run_slice(run_id):
        _advance(run_id)


def _requeue_between_steps(run_id, owner: str) -> None:
    commit_flush(run_id)
    with transaction.atomic():
        if run_transition(
            run_id=run_id,
            to=RunStatus.QUEUED,
            expect=[RunStatus.RUNNING],
            owner=owner,
            payload=events.run_requeued(reason="time slice used up"),
        ):
            run_enqueue(run_id=run_id)


def _advance(run_id) -> None:
    owner = process_owner()
    claimed = run_claim_read(run_id=run_id, owner=owner)
    if claimed is None:
        log.info("run %s: not claimable (taken, parked or finished)", run_id)
        return
    log.info("run %s: claimed by %s", run_id, owner)
    renewer.hold(run_id)
    slice_ends = time.monotonic() + settings.AGENTRY_TASK_SLICE_SECONDS
    try:
        # The first step starts from what the claim read with it.
        carried = Carried(*step_history(*claimed))
        while went_on := _step(run_id, owner, carried):
            carried = went_on if isinstance(went_on, Carried) else None
            # A call the last commit started runs in this slice: requeued, it would be found
            # running by the next one, as after a worker's crash.
            if time.monotonic() > slice_ends and not (carried and carried.started):
                # A long run goes back to the queue between steps, so no task runs unbounded
                # (thread pools cannot enforce Celery's time limits) and other runs get a turn.
                _requeue_between_steps(run_id, owner)
                break
    except LeaseLost:
        log.warning("run %s: lease lost; another worker has taken it over", run_id)
    except Exception:
        log.exception("run %s failed", run_id)
        # LeaseLost: the held commit of this worker's step cannot be made (engine.held), and the
        # run is another worker's now.
        with contextlib.suppress(LeaseLost):
            run_finish(
                run_id=run_id,
                status=RunStatus.FAILED,
                stop_reason=StopReason.INTERNAL_ERROR,
                error=traceback.format_exc(limit=20),
            )
    finally:
        # Whatever ended the slice, a step's held commit is made (LeaseLost: it cannot be).
        with contextlib.suppress(LeaseLost):
            commit_flush(run_id)
        renewer.release(run_id)
    log.info("run %s: released", run_id)
